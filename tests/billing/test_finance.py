"""Issued invoices: issue_invoices and export_invoices (call_command), immutability, the
Django admin's read-only views and CSV action."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from billing import exports
from billing.models import DocumentSequence, ImmutableError, Invoice, InvoiceLine, LedgerEntry
from billing.services import InvoiceAlreadyIssued, NothingToInvoice, invoice_issue, invoice_rate
from config import clock
from svccore import dates
from tests.billing.conftest import hour, record
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db

END = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
IN = dt.datetime(2026, 4, 15, 9, tzinfo=dt.UTC)


def year() -> int:
    """The year the documents are numbered in, read when asked (not at import: a run that
    starts on 31 December would otherwise expect last year's numbers)."""
    return clock.now().year


@pytest.fixture
def billed(customer, make_batch, activate, direct, upload):
    """April 2026: 2 DETECT-STD units (90.00) activated, 1 API-METERED direct licence
    (15.00) with 1 510 000 inferences (A = 10 000 + 2 x 50 000 for DETECT-STD pooled
    separately): overage 1 000 000 x 1.20 = 1200.00 and 500 000 x 0.80 = 400.00.
    Total 180.00 + 15.00 + 1200.00 + 400.00 = 1795.00."""
    batch = make_batch(units=5, sku="DETECT-STD")
    activate(batch, "cam-1", at=IN)
    activate(batch, "cam-2", at=IN)
    metered = direct("API-METERED", "m-1", at=IN)
    upload(metered, [record(hour(IN) + i * 3600, inferences=755_000) for i in range(2)])
    return customer


def issue(*args: str) -> str:
    out = io.StringIO()
    call_command("issue_invoices", *args, stdout=out)
    return out.getvalue()


def test_issue_invoices_stores_invoice_lines_and_numbers(billed):
    other = CustomerFactory()  # nothing to invoice: skipped, and no number used
    output = issue("--period-days", "30", "--end", "2026-05-01")
    assert "1 invoice issued" in output
    invoice = Invoice.objects.get()
    assert invoice.number == f"INV-{year()}-000001"
    assert (invoice.customer_id, invoice.period_days, invoice.currency) == (billed.id, 30, "EUR")
    assert (invoice.period_start, invoice.period_end) == (END - dt.timedelta(days=30), END)
    assert invoice.total == Decimal("1795.00")
    rated = invoice_rate(customer_id=billed.id, period_days=30, now=END)
    stored = [(li.kind, li.sku, li.quantity, li.unit, li.unit_price, li.amount)
              for li in invoice.lines.order_by("position")]  # fmt: skip
    assert stored == [(li["kind"], li["sku"], li["quantity"], li["unit"], li["unit_price"],
                       li["amount"]) for li in rated["lines"]]  # fmt: skip
    assert [li[5] for li in stored] == [
        Decimal(x) for x in ("180.00", "15.00", "1200.00", "400.00")
    ]
    assert not Invoice.objects.filter(customer=other).exists()


def test_issuing_again_never_invoices_the_same_window_twice(billed):
    issue("--period-days", "30", "--end", "2026-05-01")
    output = issue("--period-days", "30", "--end", "2026-05-01", "--customer", billed.id)
    assert "0 invoices issued" in output and "already invoiced" in output
    assert Invoice.objects.count() == 1
    with pytest.raises(InvoiceAlreadyIssued):
        invoice_issue(customer_id=billed.id, period_days=30, end=END)


def test_numbers_are_gapless_and_sequential(billed, make_batch, activate):
    second = CustomerFactory()
    batch = make_batch(units=2, sku="DETECT-STD", owner=second)
    activate(batch, "cam-x", at=IN)
    nobody = CustomerFactory()
    with pytest.raises(NothingToInvoice):  # a rolled-back issue gives its number back
        invoice_issue(customer_id=nobody.id, period_days=30, end=END)
    issue("--period-days", "30", "--end", "2026-05-01")
    activate(batch, "cam-y", at=END + dt.timedelta(days=3))
    # The next period of each customer starts on May 1st; only the second owes anything.
    output = issue("--period-days", "30", "--end", "2026-06-01")
    assert "1 invoice issued" in output
    numbers = sorted(Invoice.objects.values_list("seq", flat=True))
    assert numbers == [1, 2, 3]
    assert DocumentSequence.objects.get(series="INV", year=year()).last == 3
    assert set(Invoice.objects.values_list("number", flat=True)) == {
        f"INV-{year()}-{n:06d}" for n in numbers
    }


def test_issue_without_end_covers_whole_days_to_today(billed):
    invoice = invoice_issue(customer_id=billed.id, period_days=365)
    today = timezone.now().astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert invoice.period_end == today


def test_todays_activity_is_skipped_saying_from_which_day_it_can_be_invoiced(
    customer, make_batch, activate, direct
):
    """A fresh install: everything happened today, after the last possible period end
    (00:00 UTC today). Every skipped customer is listed with the reason and the numbers,
    and the day its activity can first be invoiced; nothing is issued early."""
    activate(make_batch(units=2), "cam-today")
    direct("DETECT-STD", "cam-direct")
    idle = CustomerFactory()
    today = timezone.now().astimezone(dt.UTC).date()
    output = issue("--period-days", "30")
    assert "0 invoices issued, 2 customers skipped" in output
    start = today - dt.timedelta(days=30)
    assert (
        f"skipped {customer.id}: customer {customer.id} owes nothing for "
        f"{dates.period(start, today)} (0 new activations, 0 direct licences, 0 "
        "inferences); no invoice issued. Its 1 activation, 1 direct licence, 0 usage "
        f"records from {dates.day(today)} on fall after this period: a period ends with a "
        "day before today (00:00 UTC), so they can be invoiced from "
        f"{dates.day(today + dt.timedelta(days=1))}, in a period ending then or later"
    ) in output
    assert (
        f"skipped {idle.id}: customer {idle.id} owes nothing for "
        f"{dates.period(start, today)} (0 new activations, 0 direct licences, 0 "
        "inferences); no invoice issued\n"
    ) in output
    assert not Invoice.objects.exists()


def test_issue_for_unknown_customer_fails_clearly():
    with pytest.raises(CommandError, match="CUST-NOPE does not exist"):
        issue("--period-days", "30", "--customer", "CUST-NOPE")


def test_issued_invoice_is_immutable(billed):
    issue("--period-days", "30", "--end", "2026-05-01")
    invoice = Invoice.objects.get()
    invoice.total = Decimal("1.00")
    with pytest.raises(ImmutableError):
        invoice.save()
    with pytest.raises(ImmutableError):
        invoice.delete()
    line = invoice.lines.first()
    line.amount = Decimal("0")
    with pytest.raises(ImmutableError):
        line.save()
    invoice.refresh_from_db()
    assert invoice.total == Decimal("1795.00")


def read_csv(path) -> list[dict]:
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"), newline="")))


def test_export_csv_one_row_per_line(billed, tmp_path):
    issue("--period-days", "30", "--end", "2026-05-01")
    out = tmp_path / "invoices.csv"
    call_command("export_invoices", "--format", "csv", "--out", str(out), stderr=io.StringIO())
    rows = read_csv(out)
    assert list(rows[0]) == list(exports.COLUMNS)
    assert [(r["kind"], r["sku"], r["quantity"], r["unit_price"], r["amount"]) for r in rows] == [
        ("unit_activation", "DETECT-STD", "2", "90.00", "180.00"),
        ("direct_license", "API-METERED", "1", "15.00", "15.00"),
        ("metered_overage", "API-METERED", "1000", "1.20", "1200.00"),
        ("metered_overage", "API-METERED", "500", "0.80", "400.00"),
    ]
    assert {r["invoice_number"] for r in rows} == {f"INV-{year()}-000001"}
    assert {
        (r["customer_id"], r["period_start"], r["period_end"], r["currency"]) for r in rows
    } == {(billed.id, "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", "EUR")}


def test_export_json_and_since_filter(billed, tmp_path):
    issue("--period-days", "30", "--end", "2026-05-01")
    out = tmp_path / "invoices.json"
    call_command("export_invoices", "--format", "json", "--out", str(out), "--since",
                 "2000-01-01", stderr=io.StringIO())  # fmt: skip
    rows = json.loads(out.read_text())
    assert [(r["quantity"], r["unit_price"], r["amount"]) for r in rows] == [
        (2, 90, 180),
        (1, 15, 15),
        (1000, 1.2, 1200),
        (500, 0.8, 400),
    ]
    tomorrow = (timezone.now() + dt.timedelta(days=1)).date().isoformat()
    said = io.StringIO()
    call_command("export_invoices", "--format", "json", "--out", str(out), "--since", tomorrow,
                 stderr=said)  # fmt: skip
    assert json.loads(out.read_text()) == []
    assert said.getvalue().strip() == (
        f"0 invoice lines written to {out} "
        f"(no invoice or credit note has been issued on or after {tomorrow})"
    )


def test_export_rejects_bad_date(tmp_path):
    with pytest.raises(CommandError, match="--since"):
        call_command("export_invoices", "--format", "csv", "--out", str(tmp_path / "x.csv"),
                     "--since", "May 1st")  # fmt: skip


def test_csv_cells_cannot_start_a_formula(make_batch, activate, tmp_path):
    evil = CustomerFactory(name='=HYPERLINK("http://x")')
    activate(make_batch(units=1, sku="DETECT-STD", owner=evil), "cam-e", at=IN)
    invoice_issue(customer_id=evil.id, period_days=30, end=END)
    buffer = io.StringIO(newline="")
    exports.write_csv(exports.invoice_rows(Invoice.objects.all()), buffer)
    row = next(csv.DictReader(io.StringIO(buffer.getvalue().lstrip("\ufeff"))))
    assert row["customer_name"].startswith("'=")


def test_preview_csv_of_a_rated_invoice(billed):
    rated = invoice_rate(customer_id=billed.id, period_days=30, now=END)
    text = exports.preview_csv(rated, customer_name=billed.name)
    rows = list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"))))
    assert [r["amount"] for r in rows] == ["180.00", "15.00", "1200.00", "400.00"]
    assert {r["invoice_number"] for r in rows} == {""}


def test_admin_shows_invoices_lines_and_usage_read_only(billed, admin_client):
    issue("--period-days", "30", "--end", "2026-05-01")
    invoice = Invoice.objects.get()
    for url in ("/admin/billing/invoice/", f"/admin/documents/{invoice.number}/",
                "/admin/billing/invoiceline/", "/admin/billing/usagedaily/",
                "/admin/billing/usagerecord/", "/admin/billing/usagerecord/?q=m-1",
                "/admin/billing/ledgerentry/", f"/admin/billing/ledgerentry/?q={invoice.number}",
                "/admin/billing/prunedusagemonth/"):  # fmt: skip
        response = admin_client.get(url)
        assert response.status_code == 200, url
    # The admin's page of an invoice is its document, with the usage it billed.
    response = admin_client.get(f"/admin/billing/invoice/{invoice.pk}/change/", follow=True)
    assert response.redirect_chain == [(f"/admin/documents/{invoice.number}/", 302)]
    page = response.content.decode()
    assert invoice.number in page and "1,200.00" in page and 'name="_save"' not in page
    assert "metered usage billed" in page.lower() and "1,510,000" in page
    assert admin_client.get("/admin/billing/invoice/add/").status_code == 403
    response = admin_client.post(f"/admin/billing/invoice/{invoice.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert Invoice.objects.filter(pk=invoice.pk).exists()


def test_admin_action_downloads_the_same_csv(billed, admin_client, tmp_path):
    issue("--period-days", "30", "--end", "2026-05-01")
    invoice = Invoice.objects.get()
    response = admin_client.post(
        "/admin/billing/invoice/",
        {"action": "download_csv", "_selected_action": [invoice.pk]},
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    out = tmp_path / "cli.csv"
    call_command("export_invoices", "--format", "csv", "--out", str(out), stderr=io.StringIO())
    assert response.content == out.read_bytes()
    assert InvoiceLine.objects.count() == 4


@pytest.mark.skipif(connection.vendor != "postgresql", reason="database triggers: PostgreSQL")
def test_database_refuses_to_change_an_issued_invoice(billed):
    """Bulk updates and raw SQL bypass save()/delete(); the triggers do not let them."""
    issue("--period-days", "30", "--end", "2026-05-01")
    invoice = Invoice.objects.get()
    table = connection.ops.quote_name(Invoice._meta.db_table)
    attempts = [
        lambda: Invoice.objects.filter(pk=invoice.pk).update(total=Decimal("1.00")),
        lambda: InvoiceLine.objects.filter(invoice=invoice).update(amount=0),
        lambda: InvoiceLine.objects.filter(invoice=invoice)._raw_delete(using="default"),
        lambda: LedgerEntry.objects.filter(document=invoice).update(quantity=0),
        lambda: connection.cursor().execute(f"UPDATE {table} SET total = 0"),  # noqa: S608
        lambda: connection.cursor().execute(f"DELETE FROM {table}"),  # noqa: S608
    ]
    for attempt in attempts:
        with pytest.raises(IntegrityError, match="issued billing documents are immutable"):
            with transaction.atomic():
                attempt()
    invoice.refresh_from_db()
    assert invoice.total == Decimal("1795.00") and invoice.lines.count() == 4
