"""Migration 0002 carries invoices issued before the ledger over as they were billed:
overlapping old invoices show as double billing, which credit notes then correct."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing.models import DocumentSequence, Invoice, LedgerEntry
from billing.reconciliation import ledger_reconcile
from tests.billing.conftest import hour
from tests.history import rewritten

pytestmark = pytest.mark.django_db(transaction=True)

OLD = [("billing", "0001_initial")]
UTC = dt.UTC


def migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def test_invoices_issued_before_the_ledger_are_carried_over(customer, make_batch, activate):
    unit = activate(
        make_batch(units=3, sku="API-METERED"), "cam-1", at=dt.datetime(2026, 10, 25, tzinfo=UTC)
    )
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()  # every app: all it undid
    migrate(OLD)
    try:
        apps = MigrationExecutor(connection).loader.project_state(OLD).apps
        record, daily = (
            apps.get_model("billing", "UsageRecord"),
            apps.get_model("billing", "UsageDaily"),
        )
        invoice, sequence = (
            apps.get_model("billing", "Invoice"),
            apps.get_model("billing", "InvoiceSequence"),
        )
        first = hour(dt.datetime(2026, 10, 20, tzinfo=UTC))
        received, issued = (dt.datetime(2026, 11, d, tzinfo=UTC) for d in (1, 23))
        for day in range(30):
            start = first + day * 86_400
            record.objects.create(license_id=unit.id, customer_id=customer.id, sku="API-METERED",
                                  device_id="cam-1", received_at=received, period_start=start,
                                  period_end=start + 3600, inferences=1000, frames=0,
                                  stream_seconds=0, events=0)  # fmt: skip
            daily.objects.create(license_id=unit.id, customer_id=customer.id, sku="API-METERED",
                                 day=dt.date(2026, 10, 20) + dt.timedelta(days=day), records=1,
                                 inferences=1000)  # fmt: skip
        # The overlapping windows (INV-105 to 108), issued the old way.
        windows = [((10, 23), (11, 22)), ((10, 24), (11, 23)), ((10, 22), (11, 22)),
                   ((10, 22), (11, 21))]  # fmt: skip
        for seq, ((m1, d1), (m2, d2)) in enumerate(windows, start=105):
            start, end = (dt.datetime(2026, m, d, tzinfo=UTC) for m, d in ((m1, d1), (m2, d2)))
            invoice.objects.create(number=f"INV-2026-{seq:06d}", year=2026, seq=seq,
                                   customer_id=customer.id, period_start=start, period_end=end,
                                   period_days=(end - start).days, currency="EUR",
                                   total=Decimal("15.00"), issued_at=issued)  # fmt: skip
        sequence.objects.create(year=2026, last=108)
    finally:
        migrate(latest)
    assert DocumentSequence.objects.get(series="INV", year=2026).last == 108
    assert sorted(Invoice.objects.values_list("period_start__day", "revision")) == [
        (22, 0), (22, 1), (23, 0), (24, 0),
    ]  # fmt: skip
    # Records from October 20th to November 18th; INV-105 covered October 23rd onwards.
    assert LedgerEntry.objects.filter(document_id="INV-2026-000105", kind="usage").count() == 27
    result = ledger_reconcile(customer_id=customer.id)
    assert f"activation {unit.id} is billed 4 times" in result.problems
    assert result.totals().waiting == 2_000  # October 20th and 21st: in no old window
    with pytest.raises(CommandError, match="problem"):
        call_command("reconcile", stdout=io.StringIO(), stderr=io.StringIO())
    # These hand-made old invoices have a total and no lines, so a credit note of one
    # fails the commit check of PostgreSQL (total = sum of lines): issued as a repair.
    with rewritten():
        for number in ("INV-2026-000106", "INV-2026-000107", "INV-2026-000108"):
            call_command("credit_note", number, "--reason", "overlap", stdout=io.StringIO())
    result = ledger_reconcile(customer_id=customer.id)
    # (These hand-made old invoices have no lines, which reconcile reports too.)
    assert not [p for p in result.problems if "more than once" in p or "is billed" in p]
    # Only INV-105 stands: October 23rd onwards; the 20th to 22nd wait for the next one.
    assert (result.totals().billed, result.totals().waiting) == (27_000, 3_000)
