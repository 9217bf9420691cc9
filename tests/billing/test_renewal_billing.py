"""Renewals are billed once, in the period that contains them (issue 16): a ``renewal``
line per batch (units activated when renewed x the batch's unit price) and per direct
licence (1 x its price), in the invoice preview and on exactly one issued invoice;
reconciliation counts them."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from billing.issuing import invoice_issue
from billing.limits import start_of_day
from billing.models import Invoice, LedgerEntry
from billing.reconciliation import ledger_reconcile
from billing.services import credit_note_issue
from licensing.services import license_issue
from licensing.services.activation import unit_activate
from licensing.services.renewals import license_renew

pytestmark = pytest.mark.django_db

DAY = 86400


def renewal_lines(invoice: Invoice) -> list[tuple]:
    return [
        (line.batch_id, line.license_id, line.quantity, line.unit_price, line.amount)
        for line in invoice.lines.filter(kind="renewal").order_by("position")
    ]


def test_the_preview_bills_a_renewal_in_its_window(admin_api, customer, make_batch, server_clock):
    batch = make_batch(units=10, sku="VISION-PRO")  # 240.00 a unit
    for n in range(3):
        unit_activate(batch_token=batch.license.token, device_id=f"cam-{n}")
    direct = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-d")
    license_renew(idempotency_key="b", batch_id=batch.id)
    license_renew(idempotency_key="d", license_id=direct.id)

    preview = admin_api.get(f"/v1/admin/invoice/{customer.id}").json()

    renewals = [line for line in preview["lines"] if line["kind"] == "renewal"]
    assert [line["kind"] for line in preview["lines"]][-2:] == ["renewal", "renewal"]
    assert renewals == [
        {
            "kind": "renewal",
            "sku": "DETECT-STD",
            "description": f"DETECT-STD licence {direct.id} renewed",
            "quantity": 1,
            "unit": "licence",
            "unit_price": 90.00,
            "amount": 90.00,
            "license_id": direct.id,
        },
        {
            "kind": "renewal",
            "sku": "VISION-PRO",
            "description": f"VISION-PRO batch {batch.id} renewed: units activated when renewed",
            "quantity": 3,
            "unit": "unit",
            "unit_price": 240.00,
            "amount": 720.00,
            "batch_id": batch.id,
        },
    ]
    server_clock(40 * DAY)  # the renewals fall out of a 30-day window
    later = admin_api.get(f"/v1/admin/invoice/{customer.id}").json()
    assert not [line for line in later["lines"] if line["kind"] == "renewal"]


def test_a_renewal_is_billed_exactly_once_across_two_issued_invoices(
    customer, make_batch, server_clock
):
    today = start_of_day()
    batch = make_batch(units=10, sku="DETECT-STD")  # 90.00 a unit
    for n in range(2):
        unit_activate(batch_token=batch.license.token, device_id=f"cam-{n}")
    license_renew(idempotency_key="first", batch_id=batch.id)  # 2 units activated
    server_clock(10 * DAY)
    unit_activate(batch_token=batch.license.token, device_id="cam-2")
    server_clock(20 * DAY)
    license_renew(idempotency_key="second", batch_id=batch.id, term_days=30)  # 3 units
    license_renew(idempotency_key="second", batch_id=batch.id, term_days=30)  # a retry
    server_clock(32 * DAY)

    first = invoice_issue(customer_id=customer.id, period_days=30, end=today + dt.timedelta(1))
    second = invoice_issue(customer_id=customer.id, period_days=30, end=today + dt.timedelta(31))

    assert renewal_lines(first) == [(batch.id, "", 2, Decimal("90"), Decimal("180.00"))]
    assert renewal_lines(second) == [(batch.id, "", 3, Decimal("90"), Decimal("270.00"))]
    entries = LedgerEntry.objects.filter(kind="renewal")
    assert sorted(entries.values_list("document_id", "quantity")) == sorted(
        [(first.number, 2), (second.number, 3)]
    )
    ledger = ledger_reconcile(customer_id=customer.id)
    assert ledger.ok, ledger.problems
    row = next(row for row in ledger.rows if row.sku == "DETECT-STD")
    assert (row.renewal_units, row.renewal_units_billed) == (5, 5)


def test_a_credited_renewal_waits_for_the_next_invoice_and_is_billed_once_more(
    customer, make_batch, server_clock
):
    today = start_of_day()
    batch = make_batch(units=5, sku="DETECT-STD")
    unit_activate(batch_token=batch.license.token, device_id="cam-0")
    license_renew(idempotency_key="k", batch_id=batch.id)
    server_clock(2 * DAY)
    first = invoice_issue(customer_id=customer.id, period_days=30, end=today + dt.timedelta(1))
    credit_note_issue(number=first.number, reason="wrong term")
    server_clock(32 * DAY)

    second = invoice_issue(customer_id=customer.id, period_days=30, end=today + dt.timedelta(31))

    ((line,),) = [list(second.lines.filter(kind="renewal"))]
    assert (line.quantity, line.amount) == (1, Decimal("90.00"))
    assert "1 renewed before this period" in line.description
    assert ledger_reconcile(customer_id=customer.id).ok


def test_a_renewal_of_a_batch_with_no_unit_activated_bills_nothing(
    admin_api, customer, make_batch, server_clock
):
    batch = make_batch(units=5, sku="DETECT-STD")
    license_renew(idempotency_key="k", batch_id=batch.id)
    preview = admin_api.get(f"/v1/admin/invoice/{customer.id}").json()
    assert not [line for line in preview["lines"] if line["kind"] == "renewal"]
    # Something else to bill, so that an invoice is issued at all.
    license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-d")
    today = start_of_day()
    server_clock(2 * DAY)
    invoice = invoice_issue(customer_id=customer.id, period_days=30, end=today + dt.timedelta(1))
    assert renewal_lines(invoice) == []
    assert not LedgerEntry.objects.filter(kind="renewal").exists()
