"""Invoice rating benchmark: one customer with 1000 activated cameras and 10^4, 10^6 and
10^7 stored usage records on PostgreSQL.

Creates its own database (``svc_bench_rating``) and activates the fleet through the
licensing service. Then, for each step, it grows the same database to that many usage
records and times ``invoice_rate`` for a 30-day window, in-process and through the
Django stack (``GET /v1/admin/invoice``), beside a naive SUM over the records whose
result it must equal.

The records are hourly, one per device and hour, ending at the last whole hour: a step
of N records covers the last N / 1000 hours of the whole fleet, so the records reach
further back as they grow (10 hours, ~42 days, ~14 months) and the 30-day window holds
all of them, 72 % and 7 % of them. Each step adds the older hours by
``INSERT ... SELECT`` from ``generate_series`` in chunks of a million records (one
progress line each), creates the monthly partitions they need first
(``billing.partitions.partitions_ensure``) and extends the daily rollups by SQL from the
records it stored (the same sums ingestion keeps), then checks the rollups against the
records and runs ``VACUUM ANALYZE``.

It prints the machine (CPUs, PostgreSQL version), progress and load time per step, and
a table with one row per step: records, rating median and max, the Django view's median,
the naive SUM, the rating median relative to the 10^4 step's, and OK or OVER: whether the
rating median is under the product's 50 ms target. Under the table, what rating read at
each step (rollup rows of the whole days, records of the partial days at the window's
edges): its cost follows those, not the records stored, so the step from 10^4 (a window
of 10 hours) to 10^6 (a full window) shows the window filling, and the step from 10^6 to
10^7 the records growing. Being over the target is reported, not a failure; a rated usage
that differs from the naive SUM is (an assertion error, exit status 1).

Run from the repository root: ``python bench/bench_rating.py`` (or ``make bench``);
under two minutes on two cores. Setting: BENCH_PG (server URL without database).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = "svc_bench_rating"
DEVICES = 1000
STEPS = (10_000, 1_000_000, 10_000_000)
CHUNK = 1_000_000  # records per INSERT statement (and per progress line)
HOUR = 3600
RUNS = 100
TARGET_MS = 50.0
WINDOW_DAYS = 30


@dataclass
class Row:
    records: int
    median_ms: float
    max_ms: float
    http_median_ms: float
    naive_ms: float
    rated: dict
    rollups_read: int
    records_read: int


def recreate_database(*, create: bool = True) -> None:
    _support.recreate_database(PG, DB_NAME, create=create)


def configure(tmp: Path) -> None:
    _support.configure_django(tmp, PG, DB_NAME)


def machine() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT version(), current_setting('shared_buffers')")
        version, shared_buffers = cursor.fetchone()
    return f"{os.cpu_count()} CPUs; {version}; shared_buffers {shared_buffers}"


def fleet() -> str:
    """The customer's 990 activated units and 10 direct licences, through the services.
    Returns the customer id."""
    from customers.services import customer_create
    from licensing.services import batch_issue, license_issue
    from licensing.services.activation import unit_activate

    customer = customer_create(name="Bench rating", kind="oem", id="RATING")
    batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=DEVICES)
    for n in range(DEVICES - 10):
        unit_activate(batch_token=batch.license.token, device_id=f"rate-cam-{n:04d}")
    for n in range(10):
        license_issue(customer_id=customer.id, sku="DETECT-STD", device_id=f"rate-direct-{n}")
    return customer.id


def ensure_partitions(first: int, last: int) -> None:
    """The monthly partitions of the records with ``first <= period_start < last``."""
    from billing.limits import month_start, next_month
    from billing.partitions import partitions_ensure

    months, month = [], month_start(dt.datetime.fromtimestamp(first, tz=dt.UTC).date())
    while month <= dt.datetime.fromtimestamp(last - 1, tz=dt.UTC).date():
        months.append(month)
        month = next_month(month)
    partitions_ensure(months)


def load_hours(customer_id: str, first_hour: int, after_hour: int) -> None:
    """One record per licence of the fleet and hour in [first_hour, after_hour) (Unix
    seconds, whole hours), and the daily rollups extended by their sums, in one
    transaction. A rollup day the older hours share with stored ones is added to."""
    from django.db import connection, transaction

    from billing.limits import DAY

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO billing_usagerecord (license_id, customer_id, sku, device_id,
                received_at, period_start, period_end, inferences, frames, stream_seconds,
                events)
            SELECT l.id, l.customer_id, l.sku, l.device_id, now(), h, h + 3600,
                300 + (h / 3600 * 37 + length(l.id)) %% 100, 54000, 3600, h / 3600 %% 5
            FROM generate_series(%s, %s, 3600) h CROSS JOIN licensing_license l
            WHERE l.customer_id = %s AND l.kind IN ('unit', 'direct')
            """,
            [first_hour, after_hour - HOUR, customer_id],
        )
        cursor.execute(
            f"""
            INSERT INTO billing_usagedaily AS daily (license_id, customer_id, sku, day,
                records, inferences, frames, stream_seconds, events)
            SELECT license_id, customer_id, sku, DATE '1970-01-01' + (period_start / {DAY})::int,
                count(*), sum(inferences), sum(frames), sum(stream_seconds), sum(events)
            FROM billing_usagerecord WHERE period_start >= %s AND period_start < %s
            GROUP BY 1, 2, 3, 4
            ON CONFLICT (license_id, day) DO UPDATE SET records = daily.records + excluded.records,
                inferences = daily.inferences + excluded.inferences,
                frames = daily.frames + excluded.frames,
                stream_seconds = daily.stream_seconds + excluded.stream_seconds,
                events = daily.events + excluded.events
            """,  # noqa: S608 - DAY is a constant of billing.limits
            [first_hour, after_hour],
        )


def grow(customer_id: str, last_hour: int, have: int, want: int) -> float:
    """Grow the records from ``have`` to ``want`` by adding the hours before the stored
    ones, a chunk per statement with a progress line each; check the rollups against the
    records and VACUUM ANALYZE. Returns the seconds it took."""
    from django.db import connection

    started = time.monotonic()
    after = last_hour - have // DEVICES * HOUR
    first = last_hour - want // DEVICES * HOUR
    ensure_partitions(first, after)
    step = CHUNK // DEVICES * HOUR
    loaded = have
    # Oldest first, so each chunk appends to the indexes of the hours it covers.
    for low in range(first, after, step):
        high = min(low + step, after)
        load_hours(customer_id, low, high)
        loaded += (high - low) // HOUR * DEVICES
        print(
            f"  loaded {loaded:,} / {want:,} records ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), sum(inferences) FROM billing_usagerecord")
        stored = cursor.fetchone()
        cursor.execute("SELECT sum(records), sum(inferences) FROM billing_usagedaily")
        rolled_up = cursor.fetchone()
    assert stored[0] == want, (stored, want)
    assert rolled_up == stored, (rolled_up, stored)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return time.monotonic() - started


def naive_usage(customer_id: str, start: int, end: int) -> tuple[dict[str, int], float]:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sku, sum(inferences) FROM billing_usagerecord WHERE customer_id = %s "
            "AND period_start >= %s AND period_start < %s GROUP BY sku",
            [customer_id, start, end],
        )
        sums = {sku: int(total) for sku, total in cursor.fetchall()}
    return sums, (time.perf_counter() - started) * 1000


def window_reads(customer_id: str, start: int, end: int) -> tuple[int, int]:
    """(rollup rows, usage records) that rating reads for [start, end): the rollups of the
    whole UTC days, the records of the partial days at either edge (as
    ``billing.selectors.inferences_by_sku`` splits the window)."""
    from django.db import connection

    from billing.limits import DAY, date_of

    first_full, after_full = -(-start // DAY), end // DAY
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM billing_usagedaily WHERE customer_id = %s "
            "AND day >= %s AND day < %s",
            [customer_id, date_of(first_full), date_of(after_full)],
        )
        (rollups,) = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FROM billing_usagerecord WHERE customer_id = %s "
            "AND (period_start >= %s AND period_start < %s "
            "OR period_start >= %s AND period_start < %s)",
            [customer_id, start, first_full * DAY, after_full * DAY, end],
        )
        (records,) = cursor.fetchone()
    return rollups, records


def measure(customer_id: str, records: int) -> Row:
    """Time the rating of the last 30 days in-process and through the Django view, and
    check its usage against a naive SUM over the same window."""
    from django.conf import settings
    from django.test import Client

    from billing import selectors
    from billing.services import invoice_rate

    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        rated = invoice_rate(customer_id=customer_id, period_days=WINDOW_DAYS)
        times.append((time.perf_counter() - started) * 1000)
    start, end = rated["period_start"], rated["period_end"]
    expected, naive_ms = naive_usage(customer_id, start, end)
    got = selectors.inferences_by_sku(customer_id=customer_id, start=start, end=end)
    assert got == expected, (records, got, expected)

    client = Client(HTTP_HOST="127.0.0.1", HTTP_X_ADMIN_KEY=settings.SVC_ADMIN_KEY)
    http_times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        response = client.get(f"/v1/admin/invoice/{customer_id}?period_days={WINDOW_DAYS}")
        http_times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content
    rollups_read, records_read = window_reads(customer_id, start, end)
    return Row(
        records=records,
        median_ms=statistics.median(times),
        max_ms=max(times),
        http_median_ms=statistics.median(http_times),
        naive_ms=naive_ms,
        rated=rated,
        rollups_read=rollups_read,
        records_read=records_read,
    )


def table(rows: list[Row]) -> list[str]:
    lines = [
        f"{'records':>12} | {'rating median ms':>16} | {'max ms':>7} | "
        f"{'Django view median ms':>21} | {'naive SUM ms':>12} | {'vs 10^4':>7} |",
    ]
    for row in rows:
        verdict = "OK" if row.median_ms < TARGET_MS else "OVER"
        lines.append(
            f"{row.records:>12,} | {row.median_ms:>16.1f} | {row.max_ms:>7.1f} | "
            f"{row.http_median_ms:>21.1f} | {row.naive_ms:>12.0f} | "
            f"{row.median_ms / rows[0].median_ms:>6.2f}x | {verdict}"
        )
    return lines


def main() -> int:
    begun = time.monotonic()
    recreate_database()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            configure(Path(tmp))
            from django.db import connection
            from django.utils import timezone

            print(f"machine: {machine()}", flush=True)
            now = timezone.now()
            last_hour = int(now.timestamp()) // HOUR * HOUR
            started = time.monotonic()
            customer_id = fleet()
            print(
                f"fleet: {DEVICES} licences activated through the services "
                f"({time.monotonic() - started:.0f} s)",
                flush=True,
            )
            rows: list[Row] = []
            loads: list[float] = []
            have = 0
            for records in STEPS:
                hours = records // DEVICES
                in_window = min(hours, WINDOW_DAYS * 24) / hours
                print(
                    f"step {records:,} records: {hours:,} hours back from "
                    f"{now:%Y-%m-%d %H}:00 UTC ({hours / 24:.1f} days; "
                    f"{in_window:.0%} in the {WINDOW_DAYS}-day window)",
                    flush=True,
                )
                loads.append(grow(customer_id, last_hour, have, records))
                have = records
                print(f"  load {loads[-1]:.0f} s (with the check and VACUUM ANALYZE)", flush=True)
                row = measure(customer_id, records)
                rows.append(row)
                print(
                    f"  rating median {row.median_ms:.1f} ms; it reads {row.rollups_read:,} "
                    f"rollup rows (whole days) and {row.records_read:,} records (edge days)",
                    flush=True,
                )
            connection.close()
    finally:
        recreate_database(create=False)
    print(
        f"\ninvoice rating, {DEVICES} devices, {WINDOW_DAYS}-day window, {RUNS} runs each; "
        f"target: rating median under {TARGET_MS:.0f} ms"
    )
    print("\n".join(table(rows)))
    reads = "; ".join(
        f"{row.records:,}: {row.rollups_read:,} rollup rows + {row.records_read:,} records"
        for row in rows
    )
    print(f"rating read (whole days from rollups, edge days from records): {reads}")
    rated = rows[-1].rated
    lines = ", ".join(f"{line['kind']} {line['sku']} {line['quantity']}" for line in rated["lines"])
    print(f"lines at {rows[-1].records:,}: {lines}; total {rated['total']} {rated['currency']}")
    steps = ", ".join(f"{row.records:,}: {s:.0f} s" for row, s in zip(rows, loads, strict=True))
    print(f"load per step: {steps}; {time.monotonic() - begun:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
