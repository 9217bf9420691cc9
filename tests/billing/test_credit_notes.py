"""Credit notes (issue 10): ``manage.py credit_note INV-... --reason`` issues a numbered
negative invoice in its own gapless series, returns the invoice's events to waiting,
is audited, and is exported with the invoices."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from audit.models import AuditEntry
from billing.models import DocumentSequence, Invoice, LedgerEntry, UsageDaily
from billing.reconciliation import ledger_reconcile
from config import clock
from tests.billing.conftest import hour, record

pytestmark = pytest.mark.django_db

D = Decimal
JAN, FEB, MAR = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3))


def year() -> int:
    """The year the documents are numbered in, read when asked (not at import: a run that
    starts on 31 December would otherwise expect last year's numbers)."""
    return clock.now().year


def issue(end: str) -> str:
    out = io.StringIO()
    call_command("issue_invoices", "--period-days", "31", "--end", end, stdout=out)
    return out.getvalue()


def credit(number: str, reason: str = "wrong price agreed") -> str:
    out = io.StringIO()
    call_command("credit_note", number, "--reason", reason, stdout=out)
    return out.getvalue()


def lines(invoice: Invoice) -> list[tuple]:
    return [(li.kind, li.sku, li.quantity, li.unit_price, li.amount)
            for li in invoice.lines.order_by("position")]  # fmt: skip


@pytest.fixture
def january(customer, direct, upload):
    """January: API-METERED direct licence 15.00 and 40 000 inferences (35.60)."""
    lic = direct("API-METERED", "m-1", at=JAN + dt.timedelta(days=4))
    upload(lic, [record(hour(JAN) + 9 * 86400, inferences=40_000)])
    issue("2026-02-01")
    return Invoice.objects.get()


def test_credit_note_reverses_the_invoice_and_its_events_wait_again(customer, january):
    output = credit(january.number)
    note = Invoice.objects.get(kind="credit_note")
    assert note.number == f"CN-{year()}-000001"
    assert f"issued {note.number}: -50.60 EUR, reversing {january.number}" in output
    assert (note.credits, note.total, note.reason) == (january, D("-50.60"), "wrong price agreed")
    assert (note.period_start, note.period_end) == (january.period_start, january.period_end)
    assert lines(note) == [
        (kind, sku, -quantity, price, -amount)
        for kind, sku, quantity, price, amount in lines(january)
    ]
    assert DocumentSequence.objects.get(series="CN", year=year()).last == 1
    entry = AuditEntry.objects.get(action="invoice.credit")
    assert (entry.result, entry.target) == ("ok", note.number)
    assert entry.detail["number"] == january.number
    assert UsageDaily.objects.aggregate(n=Sum("billed_inferences"))["n"] == 0
    totals = ledger_reconcile(customer_id=customer.id).totals()
    assert (totals.billed, totals.waiting, totals.licenses_billed) == (0, 40_000, 0)


def test_reissue_after_a_credit_note_bills_the_same_period_again(customer, january):
    credit(january.number)
    assert "1 invoice issued" in issue("2026-02-01")
    again = Invoice.objects.get(kind="invoice", revision=1)
    assert (again.period_start, again.period_end) == (JAN, FEB)
    assert lines(again) == lines(january) and again.total == january.total
    assert again.number == f"INV-{year()}-000002"
    result = ledger_reconcile(customer_id=customer.id)
    assert result.ok, result.problems
    assert (result.totals().billed, result.totals().waiting) == (40_000, 0)
    issue("2026-02-01")  # and only once
    assert Invoice.objects.filter(kind="invoice").count() == 2


def test_crediting_an_earlier_invoice_moves_its_events_to_the_next(customer, january, upload):
    lic = january.customer.licenses.get(device_id="m-1")
    upload(lic, [record(hour(FEB) + 86400, inferences=20_000)])
    issue("2026-03-01")  # February's invoice stays: the next period starts on March 1st
    credit(january.number)
    issue("2026-04-01")
    march = Invoice.objects.get(period_start=MAR)
    assert [li[:3] for li in lines(march)] == [
        ("direct_license", "API-METERED", 1),
        # A = 10 333.33 for 31 days; January's 40 000 come late: 29.667 thousand.
        ("metered_overage_late", "API-METERED", D("29.667")),
    ]
    assert ledger_reconcile(customer_id=customer.id).ok


def test_a_credit_note_needs_a_reason_and_an_uncredited_invoice(january):
    with pytest.raises(CommandError, match="needs a reason"):
        credit(january.number, reason="  ")
    credit(january.number)
    note = Invoice.objects.get(kind="credit_note").number
    with pytest.raises(CommandError, match=f"already credited by {note}"):
        credit(january.number)
    with pytest.raises(CommandError, match="only invoices can be credited"):
        credit(note)
    with pytest.raises(CommandError, match="INV-1999-000001 does not exist"):
        credit("INV-1999-000001")
    assert Invoice.objects.filter(kind="credit_note").count() == 1
    assert LedgerEntry.objects.filter(document_id=note).count() == 2


def test_credit_note_through_the_admin_api(admin_api, january):
    response = admin_api.post(
        f"/v1/admin/invoices/{january.number}/credit-note", {"reason": "duplicate"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["kind"], body["credits"], body["total"]) == ("credit_note", january.number, -50.6)
    again = admin_api.post(
        f"/v1/admin/invoices/{january.number}/credit-note", {"reason": "again"}, format="json"
    )
    assert again.status_code == 409 and body["number"] in again.json()["detail"]


def test_csv_export_includes_credit_notes(january, tmp_path):
    credit(january.number)
    out = tmp_path / "invoices.csv"
    call_command("export_invoices", "--format", "csv", "--out", str(out), stderr=io.StringIO())
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8-sig"))))
    assert [(r["invoice_number"][:3], r["kind"], r["amount"]) for r in rows] == [
        ("INV", "direct_license", "15.00"),
        ("INV", "metered_overage", "35.60"),
        ("CN-", "direct_license", "-15.00"),
        ("CN-", "metered_overage", "-35.60"),
    ]
    assert rows[2]["quantity"] == "-1" and rows[2]["description"].startswith("Credit of INV-")
