"""Monthly partitions of usage records and pruning them (issue 10), PostgreSQL only:
SQLite keeps the plain table."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from billing import partitions
from billing.models import PrunedUsageMonth, UsageDaily, UsageRecord
from billing.rating import invoice_rate
from billing.reconciliation import ledger_reconcile
from config.errors import InvalidInput
from tests.billing.conftest import hour, record
from tests.history import rewritten

pytestmark = pytest.mark.django_db
postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="partitions: PostgreSQL")

JAN, FEB, MAR = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3))


def where_records_are() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text, count(*) FROM {partitions.TABLE} GROUP BY 1"  # noqa: S608
        )
        return dict(cursor.fetchall())


def prune(*args: str) -> str:
    out = io.StringIO()
    call_command("prune_usage", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def camera(customer, direct):
    return direct("API-METERED", "m-1", at=JAN - dt.timedelta(days=10))


@postgresql
def test_records_go_to_their_month_and_the_dedup_key_holds_across_partitions(camera, upload):
    # December 2025 and June 2026 have no partition of their own: the default one holds
    # them. 1970 and 2090 lie outside the licence's life: refused, stored nowhere.
    december = hour(JAN - dt.timedelta(days=5))
    june = hour(dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
    future = hour(dt.datetime(2090, 1, 1, tzinfo=dt.UTC))
    records = [record(hour(JAN) + 3600, inferences=1), record(hour(FEB) + 7200, inferences=2),
               record(december, inferences=3), record(june), record(0, inferences=4),
               record(future)]  # fmt: skip
    assert upload(camera, records[:2]).json()["accepted"] == 2
    # January's partition is created after a record already went to the default one.
    assert partitions.partitions_ensure([JAN.date(), FEB.date()]) == [JAN.date(), FEB.date()]
    answer = upload(camera, records).json()
    assert (answer["accepted"], answer["duplicates"]) == (2, 2)
    assert [refused["index"] for refused in answer["refused"]] == [4, 5]
    assert where_records_are() == {
        "billing_usagerecord_y2026m01": 1,
        "billing_usagerecord_y2026m02": 1,
        "billing_usagerecord_default": 2,
    }
    assert upload(camera, records).json()["duplicates"] == 4
    assert UsageRecord.objects.count() == 4
    assert UsageDaily.objects.filter(license=camera).count() == 4


@postgresql
def test_prune_drops_a_month_only_once_billed_and_reconciled(customer, camera, upload):
    partitions.partitions_ensure([JAN.date(), FEB.date()])
    upload(camera, [record(hour(JAN) + 86400 * d, inferences=20_000) for d in range(3)])
    upload(camera, [record(hour(FEB) + 86400 * d, inferences=30_000) for d in range(2)])
    call_command(
        "issue_invoices", "--period-days", "31", "--end", "2026-02-01", stdout=io.StringIO()
    )
    output = prune("--older-than-months", "1")
    assert "pruned 2026-01: 3 records, 60,000 inferences" in output
    assert (
        "kept 2026-02: 2 records, 60,000 inferences: 2 records in 2 licence-days are not billed"
        in output
    )
    assert "billing_usagerecord_y2026m01" not in where_records_are()
    assert PrunedUsageMonth.objects.get().month == JAN.date()
    # The rollups stay: rating and reconciliation read them.
    assert UsageDaily.objects.filter(day__lt=FEB.date()).count() == 3
    rated = invoice_rate(customer_id=customer.id, period_days=31, now=FEB)
    assert rated["lines"][-1]["quantity"] == Decimal("49.667")
    assert ledger_reconcile(deep=True).ok
    # A January record that arrives after the pruning is still stored and billed once.
    assert upload(camera, [record(hour(JAN) + 86400 * 20, inferences=1_000)]).json()["accepted"]
    call_command(
        "issue_invoices", "--period-days", "31", "--end", "2026-03-01", stdout=io.StringIO()
    )
    assert "pruned 2026-02" in prune("--older-than-months", "1")
    result = ledger_reconcile(deep=True)
    assert result.ok, result.problems
    assert (result.totals().billed, result.totals().waiting) == (121_000, 0)


@postgresql
def test_prune_keeps_a_month_whose_records_do_not_match_their_rollups(camera, upload):
    partitions.partitions_ensure([JAN.date()])
    upload(camera, [record(hour(JAN) + 3600, inferences=500)])
    call_command(
        "issue_invoices", "--period-days", "31", "--end", "2026-02-01", stdout=io.StringIO()
    )
    with rewritten(), connection.cursor() as cursor:  # a rollup no longer summing its records
        cursor.execute(
            "UPDATE billing_usagedaily SET inferences = inferences + 1, "
            "billed_inferences = billed_inferences + 1"
        )
    assert "1 licence-days of records do not match their rollups" in prune(
        "--older-than-months", "1"
    )
    assert "billing_usagerecord_y2026m01" in where_records_are()
    with pytest.raises(CommandError, match="integer >= 1"):
        prune("--older-than-months", "0")


@pytest.mark.skipif(connection.vendor == "postgresql", reason="SQLite keeps the plain table")
def test_prune_on_sqlite_has_nothing_to_do_and_says_why():
    """A monthly prune_usage (docs/finance.md's block) runs on the development SQLite too:
    nothing is partitioned there, so nothing is dropped, and it says so (exit 0)."""
    assert not partitions.is_partitioned()
    output = prune("--older-than-months", "3")
    assert output.startswith("0 months pruned: usage records are not partitioned")
    assert "pruning needs PostgreSQL" in output
    with pytest.raises(InvalidInput, match="pruning needs PostgreSQL"):
        partitions.usage_prune(older_than_months=3)
