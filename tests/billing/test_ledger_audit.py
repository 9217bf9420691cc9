"""A ledger finance can audit (issue 23): ``reconcile`` checks money and raises no false
alarm, nothing bills twice even with write access to a counter, what billing reads is
guarded on PostgreSQL, and the written rules (quantity as printed, renewals without
revoked units, the currency's minor unit) hold. One tamper test per kind of change."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from billing import pricing
from billing.issuing import invoice_issue
from billing.ledger import LedgerDisagrees
from billing.models import Invoice, InvoiceLine, UsageDaily
from billing.services import credit_note_issue
from licensing.models import Activation, License, Renewal, Sku
from licensing.services import license_revoke
from licensing.services.renewals import license_renew
from tests.billing.conftest import hour, record
from tests.history import commit_checks, rewritten

pytestmark = pytest.mark.django_db
POSTGRES = connection.vendor == "postgresql"
JAN, FEB, MAR = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3))


def reconcile(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("reconcile", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return 1, out.getvalue() + err.getvalue() + str(exc)
    return 0, out.getvalue() + err.getvalue()


def tamper(sql: str, params=()) -> None:
    """Raw SQL with every trigger bypassed (PostgreSQL: replica role, as a superuser or
    a restore would), so what reconcile sees is the change itself."""
    commit_checks()
    with transaction.atomic(), connection.cursor() as cursor:
        if POSTGRES:
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)


@pytest.fixture
def every_sku(customer, make_batch, activate, direct, upload):
    """January of every catalogue SKU: a VISION-PRO batch, a DETECT-STD direct licence,
    an API-METERED direct licence over its allowance, and an ANPR-PERPETUAL camera with
    7 inferences (a SKU without overage tiers); invoiced."""
    vision = make_batch(units=5, sku="VISION-PRO")
    activate(vision, "cam-v1", at=JAN + dt.timedelta(days=2))
    anpr = make_batch(units=2, sku="ANPR-PERPETUAL")
    plate = activate(anpr, "cam-p1", at=JAN + dt.timedelta(days=3))
    detect = direct("DETECT-STD", "cam-d1", at=JAN + dt.timedelta(days=4))
    metered = direct("API-METERED", "cam-m1", at=JAN + dt.timedelta(days=5))
    assert upload(plate, [record(hour(JAN) + 9 * 86400, inferences=7)]).status_code == 200
    assert upload(metered, [record(hour(JAN) + 10 * 86400, inferences=928_737)]).status_code == 200
    assert upload(detect, [record(hour(JAN) + 11 * 86400, inferences=60_000)]).status_code == 200
    invoice = invoice_issue(customer_id=customer.id, period_days=31, end=FEB)
    return invoice


def test_a_clean_ledger_of_every_sku_reconciles_deep(every_sku):
    lines = {(line.kind, line.sku) for line in every_sku.lines.all()}
    assert ("unit_activation", "ANPR-PERPETUAL") in lines
    assert not any(kind.startswith("metered") and sku == "ANPR-PERPETUAL" for kind, sku in lines)
    for args in ((), ("--deep",), ("--customer", every_sku.customer_id, "--deep")):
        code, output = reconcile(*args)
        assert code == 0, output
        assert "OK: nothing is billed twice" in output


def test_an_overage_line_is_priced_from_its_quantity_as_printed(every_sku):
    # API-METERED: 928 737 - 10 333.333 allowance = 918 403.667 -> 918.404 thousand.
    line = every_sku.lines.get(kind="metered_overage", sku="API-METERED")
    assert line.quantity == Decimal("918.404") and line.unit_price == Decimal("1.20")
    assert line.amount == Decimal("1102.08")  # 918.404 x 1.20 = 1102.0848; exact: 1102.0844
    assert pricing.line_amount(Decimal("918.404"), Decimal("1.20"), "EUR") == line.amount


@pytest.mark.parametrize(
    "change",
    ["amount", "amount and total", "amount, unit price and total"],
)
def test_reconcile_catches_a_line_amount_raised_by_100(every_sku, change):
    line = every_sku.lines.get(kind="unit_activation", sku="VISION-PRO")
    tamper("UPDATE billing_invoiceline SET amount = amount + 100 WHERE id = %s", [line.pk])
    if "unit price" in change:
        tamper(
            "UPDATE billing_invoiceline SET unit_price = unit_price + 100 WHERE id = %s",
            [line.pk],
        )
    if "total" in change:
        tamper("UPDATE billing_invoice SET total = total + 100 WHERE id = %s", [every_sku.pk])
    code, output = reconcile()
    name = f"{every_sku.number} line {line.position} (unit_activation VISION-PRO)"
    assert code == 1
    if "unit price" in change:
        # Consistent arithmetic; the price is not the batch's: caught against the ledger,
        # and line by line by --deep.
        assert "bills 0 units of batch" in output and "at 340.00" in output
        code, output = reconcile("--deep")
        assert code == 1
        assert f"{name}: 1.000 unit x 340.0000 = 340.00 stored" in output
        assert "1 unit x 240.00 = 240.00 expected from its ledger entries" in output
    else:
        assert f"{name}: amount 340.00 stored, 240.00 expected (1.000 x 240.0000 EUR)" in output
    if change == "amount":
        assert f"{every_sku.number}: total " in output and "expected (the sum of its" in output


def test_reconcile_catches_a_credit_note_that_does_not_negate(every_sku):
    note = credit_note_issue(number=every_sku.number, reason="wrong customer")
    assert reconcile()[0] == 0
    line = note.lines.order_by("position").first()
    tamper("UPDATE billing_invoiceline SET amount = amount + 1 WHERE id = %s", [line.pk])
    tamper("UPDATE billing_invoice SET total = total + 1 WHERE id = %s", [note.pk])
    code, output = reconcile()
    assert code == 1
    assert f"{note.number} line 1 ({line.kind} {line.sku}): " in output
    assert f"(the negation of {every_sku.number} line 1" in output
    assert f"{note.number}: total " in output and f"(the negation of {every_sku.number})" in output


def test_reconcile_catches_a_planted_invoice(every_sku):
    tamper(
        "INSERT INTO billing_invoice (kind, number, year, seq, customer_id, period_start, "
        "period_end, period_days, currency, total, issued_at, revision, reason) "
        "VALUES ('invoice', 'INV-2026-000099', 2026, 99, %s, %s, %s, 28, 'EUR', 0, %s, 0, '')",
        [every_sku.customer_id, FEB - dt.timedelta(days=10), MAR, MAR],
    )
    code, output = reconcile()
    assert code == 1
    assert "INV-2026: 1 document(s) numbered beyond the last number issued (1)" in output
    assert f"INV-2026-000099 (22 January – 28 February 2026) overlaps {every_sku.number}" in output


def test_counters_reset_behind_the_ledger_never_bill_twice(every_sku):
    """The issue's double bill: billed counters zeroed by a plain UPDATE, then the next
    invoice. PostgreSQL refuses the UPDATE; with the trigger bypassed (and on SQLite,
    which has none) issuing refuses, naming the buckets, and reconcile reports them."""
    zero = "UPDATE billing_usagedaily SET billed_inferences = 0, billed_records = 0"
    if POSTGRES:
        with pytest.raises(DatabaseError, match="sums of its ledger entries"):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(zero)
        tamper(zero)
    else:
        with connection.cursor() as cursor:
            cursor.execute(zero)
    with pytest.raises(LedgerDisagrees) as refused:
        invoice_issue(customer_id=every_sku.customer_id, period_days=28, end=MAR)
    assert "INV-2026-000002 not issued: 3 usage bucket(s) would be billed beyond" in str(
        refused.value
    )
    assert "7 inferences stored, the ledger would bill 2 / 14 over 2 documents" in str(
        refused.value
    )
    assert Invoice.objects.count() == 1
    code, output = reconcile()
    assert code == 1 and "billed quantity does not match its records" in output


def test_a_renewal_bills_the_units_not_revoked(customer, make_batch, activate):
    batch = make_batch(units=5, sku="VISION-PRO")
    units = [activate(batch, f"cam-{n}") for n in range(3)]
    license_revoke(license_id=units[0].id, reason="stolen")
    renewal = license_renew(idempotency_key="r-1", batch_id=batch.id).renewal
    assert renewal.units == 2


def test_money_is_rounded_to_the_currencys_minor_unit():
    assert pricing.line_amount(Decimal("1.005"), Decimal("630.50"), "JPY") == Decimal("634")
    assert pricing.line_amount(Decimal("1.005"), Decimal("630.50"), "EUR") == Decimal("633.65")
    assert pricing.line_amount(Decimal("-1"), Decimal("0.005"), "EUR") == Decimal("-0.01")


def test_issue_invoices_names_an_overlap_and_exits_1(every_sku):
    with pytest.raises(CommandError, match="was already invoiced through 31 January 2026"):
        call_command(
            "issue_invoices", "--period-days", "30", "--end", "2026-01-20",
            "--customer", every_sku.customer_id, stdout=io.StringIO(),
        )  # fmt: skip


# --- PostgreSQL: the database itself refuses ------------------------------------------

pg_only = pytest.mark.skipif(not POSTGRES, reason="database triggers: PostgreSQL")


def refused(sql: str, params=(), match: str = "refused") -> None:
    commit_checks()
    with pytest.raises(DatabaseError, match=match):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


@pg_only
def test_what_billing_reads_refuses_change(every_sku, customer):
    activation = Activation.objects.first()
    unit = License.objects.filter(kind="unit").first()
    for sql, params in [
        ("UPDATE licensing_activation SET activated_at = activated_at + interval '40 days' "
         "WHERE id = %s", [activation.pk]),
        ("UPDATE licensing_activation SET batch_id = (SELECT min(id) FROM licensing_batch "
         "WHERE id <> licensing_activation.batch_id) WHERE id = %s", [activation.pk]),
        ("DELETE FROM licensing_activation WHERE id = %s", [activation.pk]),
        ("UPDATE licensing_license SET issued_at = now() WHERE id = %s", [unit.pk]),
        ("UPDATE licensing_license SET unit_price = 1 WHERE id = %s", [unit.pk]),
        ("DELETE FROM licensing_license WHERE id = %s", [unit.pk]),
        ("UPDATE licensing_batch SET unit_price = 1", []),
        ("UPDATE billing_usagedaily SET records = records - 1", []),
        ("UPDATE billing_usagedaily SET billed_records = billed_records + 1", []),
        ("DELETE FROM billing_usagedaily", []),
        ("UPDATE billing_documentsequence SET last = 0", []),
    ]:  # fmt: skip
        refused(sql, params)
    # Allowed: what billing does not read, and a revocation (once).
    with connection.cursor() as cursor:
        cursor.execute("UPDATE licensing_activation SET sdk_version = 'x' WHERE id = %s",
                       [activation.pk])  # fmt: skip
    license_revoke(license_id=unit.pk, reason="stolen")
    refused("UPDATE licensing_license SET revoked_at = NULL WHERE id = %s", [unit.pk])


@pg_only
def test_a_renewal_is_written_once(customer, make_batch, activate):
    batch = make_batch(units=5, sku="VISION-PRO")
    activate(batch, "cam-1")
    renewal = license_renew(idempotency_key="r-1", batch_id=batch.id).renewal
    refused("UPDATE licensing_renewal SET units = 0 WHERE id = %s", [renewal.pk])
    refused("DELETE FROM licensing_renewal WHERE id = %s", [renewal.pk])
    assert Renewal.objects.get().units == 1


@pg_only
@pytest.mark.parametrize(
    "table",
    ["billing_invoice", "billing_invoiceline", "billing_invoiceusage", "billing_ledgerentry",
     "billing_usagedaily", "billing_documentsequence", "licensing_activation",
     "licensing_renewal", "licensing_license", "licensing_batch"],
)  # fmt: skip
def test_no_ledger_table_can_be_truncated(every_sku, table):
    refused(f"TRUNCATE {table} CASCADE", match=f"TRUNCATE of {table} refused")


@pg_only
def test_a_planted_invoice_is_refused_at_commit(every_sku):
    insert = (
        "INSERT INTO billing_invoice (kind, number, year, seq, customer_id, period_start, "
        "period_end, period_days, currency, total, issued_at, revision, reason) "
        "VALUES ('invoice', %s, 2026, %s, %s, %s, %s, 28, 'EUR', %s, %s, 0, '')"
    )
    customer = every_sku.customer_id
    refused(insert, ["INV-2026-000099", 99, customer, FEB, MAR, 0, MAR],
            match="numbered by issue_invoices")  # fmt: skip
    refused(insert, ["INV-2026-000001", 1, customer, FEB, MAR, 5, MAR],
            match="duplicate key")  # fmt: skip
    # A line planted on an issued invoice: its total no longer is the sum of its lines.
    refused(
        "INSERT INTO billing_invoiceline (invoice_id, position, kind, sku, batch_id, "
        "license_id, description, quantity, unit, unit_price, amount) VALUES "
        "(%s, 99, 'unit_activation', 'VISION-PRO', '', '', 'x', 1, 'unit', 240, 240)",
        [every_sku.pk],
        match="a total is the sum of its lines",
    )


@pg_only
def test_issuing_and_crediting_pass_the_commit_checks(every_sku):
    commit_checks()  # the invoice of the fixture
    credit_note_issue(number=every_sku.number, reason="re-issue")
    invoice_issue(customer_id=every_sku.customer_id, period_days=31, end=FEB)
    commit_checks()
    assert InvoiceLine.objects.filter(invoice__number="INV-2026-000002").exists()
    assert reconcile("--deep")[0] == 0


def test_the_catalogue_holds_every_sku_kind():
    """The generated ledgers above and in test_rating_oracle cover every seeded SKU."""
    assert set(Sku.objects.values_list("code", flat=True)) >= {
        "DETECT-STD", "VISION-PRO", "ANPR-PERPETUAL", "API-METERED",
    }  # fmt: skip


def test_rewriting_history_is_declared(every_sku):
    """The escape hatch tests and repairs use: declared in the transaction."""
    with rewritten():
        UsageDaily.objects.update(frames=0)
