"""Exact money in every currency (issue 38, contract §6): unit prices recorded and billed
exactly as quoted, amounts and totals to the currency's minor unit (JPY 0, EUR 2, KWD 3
decimals, from Babel's currency data), the catalogue refusing prices finer than they are
recorded, and the widening migration keeping every stored value."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from billing import pricing
from billing.models import Invoice
from billing.services import invoice_issue
from licensing.models import Batch, Sku
from svccore import catalogue, money
from tests.billing.conftest import hour, record

JAN, FEB = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2))


def test_minor_units_come_from_the_currency_data():
    assert [money.minor_units(c) for c in ("JPY", "EUR", "KWD", "usd", "", "X1Z")] == [
        0, 2, 3, 2, 2, 2,
    ]  # fmt: skip


def test_amounts_round_to_each_currencys_minor_unit():
    assert pricing.line_amount(250, Decimal("0.0125"), "KWD") == Decimal("3.125")
    assert pricing.line_amount(1, Decimal("4.125"), "KWD") == Decimal("4.125")
    assert pricing.line_amount(Decimal("14571.074"), Decimal("0.0085"), "KWD") == Decimal("123.854")
    assert pricing.line_amount(3, Decimal("19.995"), "USD") == Decimal("59.99")  # 59.985
    assert pricing.line_amount(Decimal("1.5"), Decimal("99999"), "JPY") == Decimal("149999")
    assert money.amount(Decimal("99999.0000"), "JPY") == Decimal("99999")
    assert str(money.amount(Decimal("3.1250"), "KWD")) == "3.125"


def test_the_catalogue_refuses_prices_finer_than_recorded():
    entry = catalogue.load_entries()[0]
    entry["unit_price_tiers"] = [{"from_units": 1, "unit_price": "19.99951"}]
    with pytest.raises(ValueError, match="more than 4 decimals"):
        catalogue.normalise_entry(entry)
    entry["unit_price_tiers"] = [{"from_units": 1, "unit_price": "19.995"}]
    entry["currency"] = "CLF"
    with pytest.raises(ValueError, match="CLF has 4 decimals"):
        catalogue.normalise_entry(entry)


def _sku(code: str, currency: str, unit_price: str, per_1000: str) -> Sku:
    entry = Sku.objects.get(pk="DETECT-STD")
    entry.pk, entry.currency = code, currency
    entry.unit_price_tiers = [{"from_units": 1, "unit_price": unit_price}]
    entry.overage_tiers = [{"from_inferences": 0, "price_per_1000": per_1000}]
    entry.allowance_per_unit = 0
    entry.save()
    return entry


@pytest.mark.django_db
def test_a_kwd_invoice_bills_to_the_fils(customer, make_batch, activate, upload):
    """The issue's KWD invoice: 1 x 4.125 + 250 x 0.0125 = 7.250 (was 4.130 + 3.130)."""
    _sku("DETECT-KWD", "KWD", "4.125", "0.0125")
    batch = make_batch(units=2, sku="DETECT-KWD")
    assert batch.unit_price == Decimal("4.125")
    unit = activate(batch, "cam-k", at=JAN + dt.timedelta(days=2))
    assert upload(unit, [record(hour(JAN) + 5 * 86400, inferences=250_000)]).status_code == 200
    invoice = invoice_issue(customer_id=customer.id, period_days=31, end=FEB)
    invoice.refresh_from_db()
    lines = [(x.quantity, x.unit_price, x.amount) for x in invoice.lines.order_by("position")]
    assert lines == [
        (Decimal("1"), Decimal("4.125"), Decimal("4.125")),
        (Decimal("250"), Decimal("0.0125"), Decimal("3.125")),
    ]
    assert invoice.total == Decimal("7.250") and invoice.currency == "KWD"


@pytest.mark.django_db
def test_a_quoted_price_is_the_billed_price(customer, admin_api, activate):
    """USD tier 19.995: the batch answers and records 19.995, the invoice bills 19.995 per
    unit (3 x 19.995 = 59.985, 59.99 to the cent), never a rounded 20.00."""
    _sku("DETECT-USD", "USD", "19.995", "0.60")
    answer = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "DETECT-USD", "units": 120},
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    assert answer.json()["unit_price"] == 19.995 and answer.json()["order_value"] == 2399.4
    batch = Batch.objects.get(pk=answer.json()["batch_id"])
    assert batch.unit_price == Decimal("19.995")
    for n in range(3):
        activate(batch, f"cam-{n}", at=JAN + dt.timedelta(days=3))
    invoice = invoice_issue(customer_id=customer.id, period_days=31, end=FEB)
    line = invoice.lines.get()
    assert (line.quantity, line.unit_price, line.amount) == (3, Decimal("19.995"), Decimal("59.99"))


@pytest.mark.django_db
def test_a_jpy_invoice_has_no_decimals(customer, direct):
    _sku("DETECT-JPY", "JPY", "99999", "50")
    direct("DETECT-JPY", "cam-j", at=JAN + dt.timedelta(days=2))
    invoice = invoice_issue(customer_id=customer.id, period_days=31, end=FEB)
    line = invoice.lines.get()
    assert line.amount == Decimal("99999") and invoice.total == Decimal("99999")
    assert "99999.00" not in line.description and "99999 JPY" in line.description


LATEST_BEFORE = [
    ("billing", "0011_invoice_per_currency"),
    ("licensing", "0011_signing_keys_move_to_signing"),
]


def _migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.mark.django_db(transaction=True)
def test_widening_keeps_every_issued_amount(customer, make_batch, activate):
    """Migrate back to numeric(16,2)/(12,2), write an invoice as the old code did (the
    KWD amounts rounded to the cent), migrate forward: every value is as written."""
    graph = MigrationExecutor(connection).loader.graph
    latest = graph.leaf_nodes()  # every app: all the migration back undid
    batch = make_batch(units=3, sku="VISION-PRO")
    activate(batch, "cam-1", at=JAN + dt.timedelta(days=2))
    issued = invoice_issue(customer_id=customer.id, period_days=31, end=FEB)
    _migrate(LATEST_BEFORE)
    try:
        apps = MigrationExecutor(connection).loader.project_state(LATEST_BEFORE).apps
        old_invoice = apps.get_model("billing", "Invoice")
        old_line = apps.get_model("billing", "InvoiceLine")
        sequence = apps.get_model("billing", "DocumentSequence")
        with transaction.atomic():
            row = sequence.objects.get(series="INV", year=issued.year)
            row.last += 1
            row.save()
            old = old_invoice.objects.create(
                kind="invoice", number=f"INV-{issued.year}-{row.last:06d}", year=issued.year,
                seq=row.last, customer_id=customer.id, period_start=FEB,
                period_end=FEB + dt.timedelta(days=28), period_days=28, currency="KWD",
                total=Decimal("7.26"), issued_at=issued.issued_at, revision=0,
            )  # fmt: skip
            for position, (quantity, price, amount) in enumerate(
                [("1", "4.13", "4.13"), ("250", "0.0125", "3.13")], start=1
            ):
                old_line.objects.create(
                    invoice=old, position=position, kind="unit_activation", sku="X",
                    description="old", quantity=Decimal(quantity), unit="unit",
                    unit_price=Decimal(price), amount=Decimal(amount),
                )  # fmt: skip
    finally:
        _migrate(latest)
    again = Invoice.objects.get(pk=issued.pk)
    assert again.total == issued.total == Decimal("240.00")
    written = Invoice.objects.get(currency="KWD")
    assert written.total == Decimal("7.26")
    assert [x.amount for x in written.lines.order_by("position")] == [
        Decimal("4.13"),
        Decimal("3.13"),
    ]
    assert Batch.objects.get(pk=batch.pk).unit_price == Decimal("240.00")
    # The widened columns now hold what the contract bills.
    field = Invoice._meta.get_field("total")
    assert field.decimal_places == 3
