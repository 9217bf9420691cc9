"""``manage.py reconcile`` and the dashboard's ledger totals (issue 10; the dashboard shows
the latest stored run, issue 15): stored, billed,
waiting and unbillable per customer and SKU; exit 1 on a double bill or an invoice that
does not match its records."""

from __future__ import annotations

import datetime as dt
import io
import re
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from billing.models import Invoice, InvoiceLine, LedgerCheck, LedgerEntry, UsageDaily
from billing.reconciliation import ledger_reconcile
from tests.billing.conftest import hour, record
from tests.history import rewritten

pytestmark = pytest.mark.django_db

JAN, FEB = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2))
FUTURE = hour(dt.datetime(2090, 1, 1, tzinfo=dt.UTC))


def reconcile(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("reconcile", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue() + f"\nERROR {exc}"
    return out.getvalue(), err.getvalue()


@pytest.fixture
def ledger(customer, make_batch, activate, direct, upload, server_clock):
    """January invoiced (1 unit, 1 direct licence, 40 000 inferences); then 5000
    inferences of January arrive late, 7000 dated 2090 are stored by a server whose clock
    ran ahead to 2090 (a record may not end in the service's future), and one more unit
    is activated on February 3rd."""
    lic = direct("API-METERED", "m-1", at=JAN + dt.timedelta(days=4))
    batch = make_batch(units=3, sku="API-METERED")
    activate(batch, "u-1", at=JAN + dt.timedelta(days=6))
    upload(lic, [record(hour(JAN) + 9 * 86400, inferences=40_000)])
    call_command(
        "issue_invoices", "--period-days", "31", "--end", "2026-02-01", stdout=io.StringIO()
    )
    upload(lic, [record(hour(JAN) + 19 * 86400, inferences=5_000)])
    with server_clock.at(dt.datetime(2090, 1, 1, 1, tzinfo=dt.UTC)):
        assert upload(lic, [record(FUTURE, inferences=7_000)]).json()["accepted"] == 1
    activate(batch, "u-2", at=FEB + dt.timedelta(days=2))
    return customer


def test_reconcile_prints_stored_billed_waiting_and_unbillable(ledger):
    out, err = reconcile("--customer", ledger.id)
    assert err == ""
    lines = out.splitlines()
    named = f"{ledger.name} ({ledger.id})"  # the customer by name and id
    row = next(line for line in lines if line.startswith(named))
    expected = ["API-METERED", "52,000", "40,000", "5,000", "7,000", "2", "1", "1", "1", "0"]
    assert row.removeprefix(named).split() == [*expected, "0", "0", "0", "0", "0", "0", "0"]
    # Every number ends where its heading ends, whatever the width of the ids and names.
    header = lines[1]
    assert header.index("stored") + len("stored") == row.index("52,000") + len("52,000")
    assert len(header.rstrip()) == len(row.rstrip())
    assert "1 of 3 usage records billed, 1 waiting for the next invoice" in out
    assert "OK: nothing is billed twice" in out
    totals = ledger_reconcile(customer_id=ledger.id).totals()
    assert (totals.inferences, totals.billed, totals.waiting, totals.unbillable) == (
        52_000, 40_000, 5_000, 7_000,
    )  # fmt: skip


def test_reconcile_catches_a_planted_double_bill(ledger):
    invoice = Invoice.objects.get()
    billed = LedgerEntry.objects.filter(document=invoice, kind="usage").first()
    # A second copy of the bucket's entry, as a faulty issuer would have written it.
    with rewritten():
        LedgerEntry.objects.bulk_create([LedgerEntry(
            document=invoice, customer_id=billed.customer_id, kind="usage", sku=billed.sku,
            license_id=billed.license_id, bucket_id=billed.bucket_id, day=billed.day,
            records=billed.records, quantity=billed.quantity,
        )])  # fmt: skip
    out, err = reconcile()
    assert f"usage of {billed.license_id} on 2026-01-10: billed more than once" in err
    assert "ERROR" in err and re.search(r"\b1 problem found|\d+ problems found", err)


def test_reconcile_catches_an_activation_billed_twice(ledger):
    invoice = Invoice.objects.get()
    unit = LedgerEntry.objects.get(document=invoice, kind="activation")
    unit.pk = None
    unit._state.adding = True
    unit.save()
    _, err = reconcile("--customer", ledger.id)
    assert f"activation {unit.license_id} is billed 2 times" in err


def test_reconcile_catches_counters_and_lines_that_do_not_match(ledger):
    # Raw SQL on the rollups (not an issued document): the counters lose a record.
    table = connection.ops.quote_name(UsageDaily._meta.db_table)
    with rewritten(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET billed_inferences = billed_inferences - 1 "  # noqa: S608
                       "WHERE billed_records > 0")  # fmt: skip
    invoice = Invoice.objects.get()
    with rewritten():
        InvoiceLine.objects.create(
            invoice=invoice, position=99, kind="unit_activation", sku="API-METERED",
            batch_id="B-X", description="planted", quantity=1, unit="unit",
            unit_price=Decimal("15.00"), amount=Decimal("15.00"),
        )  # fmt: skip
    _, err = reconcile()
    assert "billed quantity does not match its records" in err
    assert (
        f"{invoice.number} bills 1 units of batch B-X at 15.00 but its ledger entries hold 0" in err
    )


def test_deep_reconcile_compares_rollups_with_records(ledger):
    assert "OK" in reconcile("--deep")[0]
    table = connection.ops.quote_name(UsageDaily._meta.db_table)
    with rewritten(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET inferences = inferences + 1, "  # noqa: S608
            "billed_inferences = billed_inferences + 1 WHERE billed_records > 0"
        )
    _, err = reconcile("--deep")
    assert "sums 1 records / 40001 inferences, the records hold 1 / 40000" in err


def test_dashboard_shows_the_same_totals_as_the_last_reconcile(ledger, admin_client):
    # The dashboard shows the latest stored run (a run reads every rollup and ledger
    # entry: seconds at fleet scale, issue 15), not one of its own.
    page = admin_client.get("/admin/dashboard/").content.decode()
    assert 'id="ledger-never"' in page and "No ledger problems" not in page
    reconcile()
    page = admin_client.get("/admin/dashboard/").content.decode()
    assert 'id="ledger-checked"' in page
    totals = ledger_reconcile().totals()
    for figure in (totals.inferences, totals.billed, totals.waiting, totals.unbillable):
        assert f">{figure:,}<" in page
    assert "No ledger problems" in page


def test_reconcile_now_from_the_dashboard_stores_a_run(ledger, admin_client):
    assert not LedgerCheck.objects.exists()
    response = admin_client.post("/admin/dashboard/reconcile/")
    assert response.status_code == 302 and response["Location"].endswith("/admin/dashboard/#ledger")
    check = LedgerCheck.objects.get()
    assert check.problems == [] and check.today == ledger_reconcile().today
    page = admin_client.get("/admin/dashboard/").content.decode()
    assert "Ledger reconciled in" in page and "No ledger problems" in page
    assert admin_client.get("/admin/dashboard/reconcile/").status_code == 405


def test_a_planted_double_bill_shows_on_the_dashboard_after_the_next_run(ledger, admin_client):
    reconcile()
    unit = LedgerEntry.objects.get(kind="activation")
    unit.pk = None
    unit._state.adding = True
    unit.save()
    assert "No ledger problems" in admin_client.get("/admin/dashboard/").content.decode()
    admin_client.post("/admin/dashboard/reconcile/")
    page = admin_client.get("/admin/dashboard/").content.decode()
    assert 'id="ledger-problems"' in page and "is billed 2 times" in page


def test_reconcile_of_an_unknown_customer_is_an_error(db):
    out, err = reconcile("--customer", "CUST-NOPE")
    assert out == "" and "ERROR no customer CUST-NOPE" in err
