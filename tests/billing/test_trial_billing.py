"""Trials are not billed as activations; their conversion is billed once (issue 42 item
3): a ``trial_conversion`` line per converted batch (trial units in service x the batch's
unit price), in the invoice preview and on exactly one issued invoice (a credit note
returns it to waiting, billed once more); activations after the conversion are paid
ones; reconciliation counts trials and conversions; on PostgreSQL what billing reads of
them is guarded. The oracle across months and currencies: test_trial_oracle.py."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction

from billing.issuing import NothingToInvoice, invoice_issue
from billing.limits import start_of_day
from billing.models import Invoice, LedgerEntry
from billing.reconciliation import ledger_reconcile
from billing.selectors import billable_units_by_sku
from billing.services import credit_note_issue
from licensing.models import Activation, TrialConversion
from licensing.services import batch_issue, license_revoke, trial_convert, unit_activate
from tests.history import commit_checks

pytestmark = pytest.mark.django_db

DAY = 86400


def lines_of(invoice: Invoice, kind: str) -> list[tuple]:
    return [
        (line.batch_id, line.quantity, line.unit_price, line.amount, line.unit)
        for line in invoice.lines.filter(kind=kind).order_by("position")
    ]


def trial(customer, units=10, sku="DETECT-STD", cameras=3):
    batch = batch_issue(customer_id=customer.id, sku=sku, units=units, trial_days=30)
    for n in range(cameras):
        unit_activate(batch_token=batch.license.token, device_id=f"{batch.id}-cam-{n}")
    return batch


def test_trial_activations_are_not_billed_and_the_conversion_is_in_the_preview(
    admin_api, customer, server_clock
):
    batch = trial(customer, cameras=3)  # DETECT-STD: 90.00 a unit
    preview = admin_api.get(f"/v1/admin/invoice/{customer.id}").json()
    assert preview["lines"] == [] and preview["total"] == 0

    trial_convert(batch_id=batch.id)
    unit_activate(batch_token=batch.license.token, device_id="after-conversion")
    preview = admin_api.get(f"/v1/admin/invoice/{customer.id}").json()

    assert [line["kind"] for line in preview["lines"]] == ["unit_activation", "trial_conversion"]
    assert preview["lines"][-1] == {
        "kind": "trial_conversion",
        "sku": "DETECT-STD",
        "description": f"DETECT-STD trial batch {batch.id} converted to paid: units on trial "
        "when converted",
        "quantity": 3,
        "unit": "unit",
        "unit_price": 90.00,
        "amount": 270.00,
        "batch_id": batch.id,
    }
    assert preview["lines"][0]["quantity"] == 1  # the camera activated after it: paid
    assert preview["total"] == 360.00
    server_clock(40 * DAY)  # the conversion falls out of a 30-day window
    later = admin_api.get(f"/v1/admin/invoice/{customer.id}").json()
    assert not [line for line in later["lines"] if line["kind"] == "trial_conversion"]


def test_a_conversion_is_billed_exactly_once_across_issued_invoices_and_credit_notes(
    customer, server_clock
):
    today = start_of_day()
    batch = trial(customer, cameras=4)
    license_revoke(
        license_id=Activation.objects.filter(batch=batch).first().license_id, reason="broken"
    )
    trial_convert(batch_id=batch.id)  # 3 units in service
    trial_convert(batch_id=batch.id)  # again: the same conversion
    server_clock(2 * DAY)

    first = invoice_issue(customer_id=customer.id, period_days=30, end=today + dt.timedelta(1))
    assert lines_of(first, "trial_conversion") == [
        (batch.id, 3, Decimal("90"), Decimal("270.00"), "unit")
    ]
    assert not lines_of(first, "unit_activation")
    credit_note_issue(number=first.number, reason="wrong price agreed")
    server_clock(32 * DAY)
    second = invoice_issue(customer_id=customer.id, period_days=30, end=today + dt.timedelta(31))
    ((line,),) = [list(second.lines.filter(kind="trial_conversion"))]
    assert (line.quantity, line.amount) == (3, Decimal("270.00"))
    assert "3 converted before this period" in line.description
    server_clock(62 * DAY)
    with pytest.raises(NothingToInvoice):
        invoice_issue(customer_id=customer.id, period_days=30, end=today + dt.timedelta(61))

    entries = LedgerEntry.objects.filter(kind="trial_conversion")
    assert sorted(entries.values_list("document_id", "quantity")) == sorted(
        [(first.number, 3), (f"CN-{first.year}-000001", -3), (second.number, 3)]
    )
    ledger = ledger_reconcile(customer_id=customer.id, deep=True)
    assert ledger.ok, ledger.problems
    (row,) = ledger.rows
    assert (row.activations, row.activations_billed, row.trials) == (0, 0, 4)
    assert (row.conversion_units, row.conversion_units_billed) == (3, 3)


def test_a_conversion_with_no_camera_on_trial_bills_nothing(customer, server_clock):
    today = start_of_day()
    empty = trial(customer, cameras=0)
    trial_convert(batch_id=empty.id)
    unit_activate(batch_token=empty.license.token, device_id="paid-1")
    server_clock(2 * DAY)
    invoice = invoice_issue(customer_id=customer.id, period_days=30, end=today + dt.timedelta(1))
    assert lines_of(invoice, "trial_conversion") == []
    assert lines_of(invoice, "unit_activation") == [
        (empty.id, 1, Decimal("90"), Decimal("90.00"), "unit")
    ]
    assert not LedgerEntry.objects.filter(kind="trial_conversion").exists()


def test_trial_units_bring_their_allowance_to_the_pool(admin_api, customer):
    """Contract §6.3: N counts unit licences taken and not revoked; a trial's are unit
    licences, whose usage the pooled allowance covers like any other's."""
    trial(customer, sku="API-METERED", cameras=2)
    assert admin_api.get(f"/v1/admin/invoice/{customer.id}").json()["lines"] == []
    now = start_of_day() + dt.timedelta(days=1)
    assert billable_units_by_sku(
        customer_id=customer.id, start=now - dt.timedelta(days=30), end=now
    ) == {"API-METERED": 2}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="database guards: PostgreSQL")
def test_what_billing_reads_of_a_trial_is_guarded(customer):
    batch = trial(customer, cameras=1)
    conversion = trial_convert(batch_id=batch.id).conversion
    commit_checks()
    for sql, params in (
        ("UPDATE licensing_activation SET trial = false WHERE batch_id = %s", [batch.id]),
        ("UPDATE licensing_trialconversion SET units = 9 WHERE id = %s", [conversion.pk]),
        ("DELETE FROM licensing_trialconversion WHERE id = %s", [conversion.pk]),
        ("TRUNCATE licensing_trialconversion CASCADE", []),
    ):
        with pytest.raises(DatabaseError, match="refused: billing reads it"):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, params)
    assert TrialConversion.objects.get().units == 1
    assert Activation.objects.get(batch=batch).trial
