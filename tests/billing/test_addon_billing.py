"""Add-ons are billed as their own invoice lines (issue 42 item 4): one ``addon`` line per
grant, quantity = the days its licences were charged over the term the price is for
(three decimals), at the unit price as quoted; each charge on exactly one issued
invoice; removal bills nothing negative, a credit note returns what it credits to
waiting. The worked example is docs/finance.md's, figure for figure."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction

from billing.issuing import NothingToInvoice, invoice_issue
from billing.models import Invoice, LedgerEntry
from billing.reconciliation import ledger_reconcile
from billing.services import credit_note_issue
from licensing.models import AddOnCharge, License, Sku
from licensing.services import addon_add, addon_remove, batch_issue, license_issue
from licensing.services.activation import unit_activate
from licensing.services.renewals import license_refresh

pytestmark = pytest.mark.django_db

UTC = dt.UTC


def at(year, month, day, hour=0, minute=0):
    return dt.datetime(year, month, day, hour, minute, tzinfo=UTC)


def addon_lines(invoice: Invoice) -> list[tuple]:
    return [
        (line.batch_id, line.license_id, line.description, line.quantity, line.unit,
         line.unit_price, line.amount)
        for line in invoice.lines.filter(kind="addon").order_by("position")
    ]  # fmt: skip


def sync(lic_id: str, when: dt.datetime, server_clock) -> None:
    """The camera's licence fetch (GET /v1/license) at ``when``."""
    lic = License.objects.get(pk=lic_id)
    with server_clock.at(when):
        license_refresh(token=lic.token, device_id=lic.device_id)


@pytest.fixture
def worked_example(customer, server_clock):
    """docs/finance.md: a VISION-PRO batch sold on 1 January 2026 (365 days, to 1 January
    2027); two cameras activated in January; anpr (60.00 EUR per unit per 365-day term)
    added on 15 March at 10:00; cam-1 syncs at 12:30 that day, cam-2 the next morning at
    08:00; cam-3 activates on 20 March at 09:00, with anpr."""
    with server_clock.at(at(2026, 1, 1)):
        batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=10)
    units = {}
    for name, when in (("cam-1", at(2026, 1, 10)), ("cam-2", at(2026, 1, 12))):
        with server_clock.at(when):
            units[name] = unit_activate(batch_token=batch.license.token, device_id=name).license_id
    with server_clock.at(at(2026, 3, 15, 10)):
        addon_add(addon="anpr", batch_id=batch.id)
    sync(units["cam-1"], at(2026, 3, 15, 12, 30), server_clock)
    sync(units["cam-2"], at(2026, 3, 16, 8), server_clock)
    with server_clock.at(at(2026, 3, 20, 9)):
        units["cam-3"] = unit_activate(
            batch_token=batch.license.token, device_id="cam-3"
        ).license_id
    return batch, units


def test_the_worked_example_of_the_finance_guide(customer, server_clock, worked_example):
    batch, units = worked_example
    days = {name: AddOnCharge.objects.get(license_id=lic).quantity for name, lic in units.items()}
    assert days == {"cam-1": 292, "cam-2": 291, "cam-3": 287}

    with server_clock.at(at(2026, 4, 1, 6)):
        invoice = invoice_issue(
            customer_id=customer.id, period_days=31, end=at(2026, 4, 1)
        )  # March

    assert addon_lines(invoice) == [
        (
            batch.id,
            "",
            f"VISION-PRO add-on Number-plate recognition (anpr) on batch {batch.id}: 3 units, "
            "870 days of 365-day terms",
            Decimal("2.384"),
            "unit-term",
            Decimal("60"),
            Decimal("143.04"),
        )
    ]
    assert [line.kind for line in invoice.lines.order_by("position")][-1] == "addon"
    assert LedgerEntry.objects.filter(kind="addon", document=invoice).count() == 3
    check = ledger_reconcile(customer_id=customer.id, deep=True)
    assert check.ok, check.problems
    row = next(row for row in check.rows if row.sku == "VISION-PRO")
    assert (row.addon_days, row.addon_days_billed) == (870, 870)


def test_removal_bills_nothing_negative_and_a_credit_note_returns_the_charges(
    customer, server_clock, worked_example
):
    batch, units = worked_example
    with server_clock.at(at(2026, 4, 1, 6)):
        march = invoice_issue(customer_id=customer.id, period_days=31, end=at(2026, 4, 1))
    with server_clock.at(at(2026, 4, 10)):
        addon_remove(addon="anpr", batch_id=batch.id, reason="not needed")
    sync(units["cam-1"], at(2026, 4, 11), server_clock)
    assert AddOnCharge.objects.count() == 3  # the cameras lose it; nothing charged back

    with server_clock.at(at(2026, 5, 1, 6)), pytest.raises(NothingToInvoice):
        invoice_issue(customer_id=customer.id, period_days=30, end=at(2026, 5, 1))

    # A refund is a credit note: the March charges wait again, for the next invoice.
    with server_clock.at(at(2026, 5, 2)):
        note = credit_note_issue(number=march.number, reason="anpr refunded")
    assert [
        (line.kind, line.quantity, line.amount) for line in note.lines.filter(kind="addon")
    ] == [("addon", Decimal("-2.384"), Decimal("-143.04"))]
    with server_clock.at(at(2026, 6, 1, 6)):
        may = invoice_issue(customer_id=customer.id, period_days=31, end=at(2026, 6, 1))
    (line,) = addon_lines(may)
    assert line[3:] == (Decimal("2.384"), "unit-term", Decimal("60"), Decimal("143.04"))
    assert line[2].endswith(
        "870 days of 365-day terms (3 charged before this period, not billed until now)"
    )
    check = ledger_reconcile(customer_id=customer.id, deep=True)
    assert check.ok, check.problems


def test_the_invoice_preview_shows_the_add_on_line(admin_api, customer, make_batch, server_clock):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-d")
    addon_add(addon="streams-4", license_id=lic.id)  # 25.00 a licence-term, 365 days

    preview = admin_api.get(f"/v1/admin/invoice/{customer.id}").json()

    (line,) = [line for line in preview["lines"] if line["kind"] == "addon"]
    assert line == {
        "kind": "addon",
        "sku": "DETECT-STD",
        "description": f"DETECT-STD add-on Four more streams (streams-4) on licence {lic.id}: "
        "1 licence, 365 days of 365-day terms",
        "quantity": 1,
        "unit": "licence-term",
        "unit_price": 25.00,
        "amount": 25.00,
        "license_id": lic.id,
    }
    assert [line["kind"] for line in preview["lines"]][-1] == "addon"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="database guards: PostgreSQL")
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE licensing_addoncharge SET quantity = quantity + 1",
        "DELETE FROM licensing_addoncharge",
        "UPDATE licensing_addongrant SET unit_price = 1",
        "UPDATE licensing_addongrant SET term_days = 730",
        "DELETE FROM licensing_addongrant",
        "TRUNCATE licensing_addoncharge CASCADE",
    ],
)
def test_what_billing_reads_of_add_ons_is_guarded_in_the_database(customer, statement):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-g")
    addon_add(addon="streams-4", license_id=lic.id)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending checks: TRUNCATE may run
    with pytest.raises(DatabaseError, match="refused"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(statement)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="database guards: PostgreSQL")
def test_a_grant_may_still_be_removed_once(customer):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-g")
    addon_add(addon="streams-4", license_id=lic.id)
    addon_remove(addon="streams-4", license_id=lic.id)  # sets removed_at: allowed
    with pytest.raises(DatabaseError, match="refused"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("UPDATE licensing_addongrant SET removed_at = NULL")


def test_an_add_on_priced_in_another_currency_gets_that_currencys_invoice(customer, server_clock):
    """The SKU's currency changed after the licence was sold: the add-on is priced in the
    SKU's currency of its sale, and the customer gets an invoice in it too."""
    with server_clock.at(at(2026, 1, 1)):
        lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-c")
    Sku.objects.filter(pk="DETECT-STD").update(currency="USD")
    with server_clock.at(at(2026, 1, 10)):
        addon_add(addon="streams-4", license_id=lic.id)
    with server_clock.at(at(2026, 2, 1, 6)):
        usd = invoice_issue(
            customer_id=customer.id, period_days=31, end=at(2026, 2, 1), currency="USD"
        )
        eur = invoice_issue(
            customer_id=customer.id, period_days=31, end=at(2026, 2, 1), currency="EUR"
        )
    assert [line.kind for line in usd.lines.all()] == ["addon"]
    assert usd.lines.get().amount == Decimal("24.38")  # 356 / 365 = 0.975 x 25 = 24.375
    assert "addon" not in [line.kind for line in eur.lines.all()]
