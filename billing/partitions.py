"""Monthly partitions of the raw usage records on PostgreSQL, and pruning them.

``billing_usagerecord`` is ``PARTITION BY RANGE (period_start)``: one partition per UTC
month (``billing_usagerecord_y2026m01`` holds the records whose ``period_start`` is in
January 2026) and a default partition for anything outside the months created (a
camera whose clock reads 1970 or 2090). PostgreSQL enforces a unique key on a
partitioned table only when the key contains the partition key; the dedup key
(device_id, period_start, period_end) does, so a record can only ever go to one
partition and the key holds across all of them, ``ON CONFLICT`` included. Ingestion
never creates partitions (its statement stays one ``INSERT``); this module does, ahead
of time, moving any rows the default partition already holds for the new month.

Pruning drops a month's partition only when every record in it is billed (its rollup
buckets' billed counters equal their sums) and reconciled (the records sum exactly to
the buckets, and the buckets agree with the ledger). The rollups, which rating and
reconciliation read, stay. SQLite keeps the plain table and never prunes.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from django.db import connection, transaction

from audit.services import audited
from billing import limits
from billing.limits import DAY, month_start, next_month
from billing.models import LedgerEntry, PrunedUsageMonth, UsageDaily, UsageRecord
from config.errors import InvalidInput

TABLE = UsageRecord._meta.db_table
DEFAULT = f"{TABLE}_default"
_NAME = re.compile(rf"\A{TABLE}_y(\d{{4}})m(\d{{2}})\Z")
MONTHS_AHEAD = 3


def partition_name(month: dt.date) -> str:
    return f"{TABLE}_y{month.year:04d}m{month.month:02d}"


def month_bounds(month: dt.date) -> tuple[int, int]:
    """[first second, first second of the next month) of ``month`` in Unix seconds."""
    return (
        limits.unix(limits.midnight(month_start(month))),
        limits.unix(limits.midnight(next_month(month))),
    )


def is_partitioned() -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [TABLE])
        row = cursor.fetchone()
    return bool(row) and row[0] == "p"


def month_partitions() -> list[dt.date]:
    """The months that have a partition, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s)",
            [TABLE],
        )
        names = [name for (name,) in cursor.fetchall()]
    months = []
    for name in names:
        match = _NAME.match(name)
        if match:
            months.append(dt.date(int(match[1]), int(match[2]), 1))
    return sorted(months)


def partitions_ensure(months: list[dt.date]) -> list[dt.date]:
    """Create the partitions of ``months`` that do not exist yet; rows the default
    partition holds for such a month move into it. Returns the months created."""
    if not is_partitioned():
        return []
    have = set(month_partitions())
    created = []
    quote = connection.ops.quote_name
    for month in sorted({month_start(m) for m in months} - have):
        low, high = month_bounds(month)
        name = quote(partition_name(month))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT EXISTS (SELECT 1 FROM {quote(DEFAULT)} "  # noqa: S608
                "WHERE period_start >= %s AND period_start < %s)",
                [low, high],
            )
            if cursor.fetchone()[0]:
                # The new partition may not overlap rows of the default one: move them.
                cursor.execute(
                    f"CREATE TABLE {name} (LIKE {quote(TABLE)} INCLUDING DEFAULTS)"  # noqa: S608
                )
                cursor.execute(
                    f"WITH moved AS (DELETE FROM {quote(DEFAULT)} "  # noqa: S608
                    "WHERE period_start >= %s AND period_start < %s RETURNING *) "
                    f"INSERT INTO {name} SELECT * FROM moved",
                    [low, high],
                )
                cursor.execute(
                    f"ALTER TABLE {quote(TABLE)} ATTACH PARTITION {name} "
                    f"FOR VALUES FROM ({low}) TO ({high})"
                )
            else:
                cursor.execute(
                    f"CREATE TABLE {name} PARTITION OF {quote(TABLE)} "
                    f"FOR VALUES FROM ({low}) TO ({high})"
                )
        created.append(month)
    return created


@dataclass
class MonthCheck:
    month: dt.date
    records: int
    inferences: int
    problem: str = ""

    @property
    def prunable(self) -> bool:
        return not self.problem


def month_check(month: dt.date) -> MonthCheck:
    """Whether the partition of ``month`` may be dropped: every record billed and
    reconciled (see the module docstring)."""
    quote = connection.ops.quote_name
    daily, ledger = quote(UsageDaily._meta.db_table), quote(LedgerEntry._meta.db_table)
    first, after = month_start(month), next_month(month)
    days = [connection.ops.adapt_datefield_value(d) for d in (first, after)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*), COALESCE(SUM(inferences), 0) "  # noqa: S608
            f"FROM {quote(partition_name(month))}"
        )
        records, inferences = cursor.fetchone()
        check = MonthCheck(month, records, int(inferences))
        cursor.execute(
            f"SELECT COUNT(*), COALESCE(SUM(records - billed_records), 0) FROM {daily} "  # noqa: S608
            "WHERE day >= %s AND day < %s "
            "AND (records <> billed_records OR inferences <> billed_inferences)",
            days,
        )
        buckets, waiting = cursor.fetchone()
        if buckets:
            check.problem = (
                f"{waiting} records in {buckets} licence-days are not billed yet "
                "(they wait for the next invoice)"
            )
            return check
        cursor.execute(
            f"""
            SELECT COUNT(*) FROM (
                SELECT license_id, period_start / {DAY} AS day_number, COUNT(*) AS records,
                    SUM(inferences) AS inferences
                FROM {quote(partition_name(month))} GROUP BY 1, 2
            ) raw FULL JOIN (
                SELECT license_id, day - DATE '1970-01-01' AS day_number, records, inferences
                FROM {daily} WHERE day >= %s AND day < %s
            ) rolled ON rolled.license_id = raw.license_id AND rolled.day_number = raw.day_number
            WHERE raw.records IS DISTINCT FROM rolled.records
                OR raw.inferences IS DISTINCT FROM rolled.inferences
            """,  # noqa: S608 - identifiers from the models and this module
            days,
        )
        (unreconciled,) = cursor.fetchone()
        if unreconciled:
            check.problem = f"{unreconciled} licence-days of records do not match their rollups"
            return check
        cursor.execute(
            f"""
            SELECT COUNT(*) FROM {daily} d LEFT JOIN (
                SELECT bucket_id, SUM(records) AS records, SUM(quantity) AS quantity
                FROM {ledger} WHERE kind = 'usage' AND day >= %s AND day < %s
                GROUP BY bucket_id
            ) e ON e.bucket_id = d.id
            WHERE d.day >= %s AND d.day < %s
                AND (d.billed_records <> COALESCE(e.records, 0)
                    OR d.billed_inferences <> COALESCE(e.quantity, 0))
            """,  # noqa: S608
            days + days,
        )
        (disagree,) = cursor.fetchone()
        if disagree:
            check.problem = f"{disagree} licence-days disagree with the ledger (run reconcile)"
    return check


@audited("usage.prune")
def usage_prune(
    *, older_than_months: int, now: dt.datetime | None = None, dry_run: bool = False
) -> list[MonthCheck]:
    """Drop the raw partitions of the months that ended more than ``older_than_months``
    months before the current month, each only if :func:`month_check` passes; the
    months ahead get their partitions first. Returns one check per month considered."""
    if type(older_than_months) is not int or older_than_months < 1:
        raise InvalidInput(f"older_than_months must be an integer >= 1, not {older_than_months!r}")
    if not is_partitioned():
        raise InvalidInput(
            "usage records are not partitioned on this database (SQLite keeps one plain "
            "table); pruning needs PostgreSQL"
        )
    today = (now or limits.now()).astimezone(dt.UTC).date()
    upcoming, month = [], month_start(today)
    for _ in range(MONTHS_AHEAD + 1):
        upcoming.append(month)
        month = next_month(month)
    partitions_ensure(upcoming)
    cutoff = month_start(today)
    for _ in range(older_than_months):
        cutoff = month_start(cutoff - dt.timedelta(days=1))
    results = []
    quote = connection.ops.quote_name
    for month in month_partitions():
        if next_month(month) > cutoff:
            break
        with transaction.atomic():
            with connection.cursor() as cursor:
                # Ingestion cannot add to the month while it is checked and dropped.
                cursor.execute(
                    f"LOCK TABLE {quote(partition_name(month))} IN SHARE ROW EXCLUSIVE MODE"
                )
            check = month_check(month)
            results.append(check)
            if check.prunable and not dry_run:
                with connection.cursor() as cursor:
                    name = quote(partition_name(month))
                    cursor.execute(f"ALTER TABLE {quote(TABLE)} DETACH PARTITION {name}")
                    cursor.execute(f"DROP TABLE {name}")
                PrunedUsageMonth.objects.create(
                    month=month,
                    records=check.records,
                    inferences=check.inferences,
                    pruned_at=limits.now(),
                )
    return results
