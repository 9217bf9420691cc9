"""Invoice rating benchmark: one customer with 1000 activated cameras and 1 000 000 stored
usage records on PostgreSQL.

Creates its own database (``svc_bench_rating``), activates the fleet through the licensing
service, loads the records (hourly, the last ~42 days) and their daily rollups by SQL,
then times ``invoice_rate`` for a 30-day window (in-process and through the Django stack)
beside a naive SUM over the records, whose result it must equal.

Run from the repository root: ``python bench/bench_rating.py`` (or ``make bench``).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = "svc_bench_rating"
DEVICES = 1000
RECORDS_PER_DEVICE = 1000
RUNS = 25


def recreate_database(*, create: bool = True) -> None:
    _support.recreate_database(PG, DB_NAME, create=create)


def configure(tmp: Path) -> None:
    _support.configure_django(tmp, PG, DB_NAME)


def load(now: dt.datetime) -> str:
    """The fleet (through the services) and its records and rollups (by SQL, the same
    sums ingestion keeps). Returns the customer id."""
    from django.db import connection

    from customers.services import customer_create
    from licensing.services import batch_issue, license_issue, unit_activate

    customer = customer_create(name="Bench rating", kind="oem", id="RATING")
    batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=DEVICES)
    for n in range(DEVICES - 10):
        unit_activate(batch_token=batch.license.token, device_id=f"rate-cam-{n:04d}")
    for n in range(10):
        license_issue(customer_id=customer.id, sku="DETECT-STD", device_id=f"rate-direct-{n}")
    last_hour = int(now.timestamp()) // 3600 * 3600
    first = last_hour - RECORDS_PER_DEVICE * 3600
    from billing.limits import month_start, next_month
    from billing.partitions import partitions_ensure

    months, month = [], month_start(dt.datetime.fromtimestamp(first, tz=dt.UTC).date())
    while month <= now.date():
        months.append(month)
        month = next_month(month)
    partitions_ensure(months)  # the monthly partitions the records go to
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO billing_usagerecord (license_id, customer_id, sku, device_id,
                received_at, period_start, period_end, inferences, frames, stream_seconds,
                events)
            SELECT l.id, l.customer_id, l.sku, l.device_id, now(), %s + g * 3600,
                %s + (g + 1) * 3600, 300 + (g * 37 + length(l.id)) %% 100, 54000, 3600,
                g %% 5
            FROM licensing_license l CROSS JOIN generate_series(0, %s) g
            WHERE l.customer_id = %s AND l.kind IN ('unit', 'direct')
            """,
            [first, first, RECORDS_PER_DEVICE - 1, customer.id],
        )
        cursor.execute(
            """
            INSERT INTO billing_usagedaily (license_id, customer_id, sku, day, records,
                inferences, frames, stream_seconds, events)
            SELECT license_id, customer_id, sku, DATE '1970-01-01' + (period_start / 86400)::int,
                count(*), sum(inferences), sum(frames), sum(stream_seconds), sum(events)
            FROM billing_usagerecord GROUP BY 1, 2, 3, 4
            """
        )
        cursor.execute("SELECT count(*) FROM billing_usagerecord")
        (records,) = cursor.fetchone()
    assert records == DEVICES * RECORDS_PER_DEVICE, records
    connection.connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return customer.id


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


def main() -> int:
    begun = time.monotonic()
    recreate_database()
    with tempfile.TemporaryDirectory() as tmp:
        configure(Path(tmp))
        from django.conf import settings
        from django.test import Client
        from django.utils import timezone

        from billing import selectors
        from billing.services import invoice_rate

        now = timezone.now()
        loading = time.monotonic()
        customer_id = load(now)
        loaded = time.monotonic() - loading

        times = []
        for _ in range(RUNS):
            started = time.perf_counter()
            rated = invoice_rate(customer_id=customer_id, period_days=30)
            times.append((time.perf_counter() - started) * 1000)
        expected, naive_ms = naive_usage(customer_id, rated["period_start"], rated["period_end"])
        got = selectors.inferences_by_sku(
            customer_id=customer_id, start=rated["period_start"], end=rated["period_end"]
        )
        assert got == expected, (got, expected)

        client = Client(HTTP_HOST="127.0.0.1", HTTP_X_ADMIN_KEY=settings.SVC_ADMIN_KEY)
        http_times = []
        for _ in range(RUNS):
            started = time.perf_counter()
            response = client.get(f"/v1/admin/invoice/{customer_id}?period_days=30")
            http_times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.content
        from django.db import connection

        connection.close()
    recreate_database(create=False)
    lines = ", ".join(f"{line['kind']} {line['sku']} {line['quantity']}" for line in rated["lines"])
    print(
        f"invoice rating, {DEVICES} devices, {DEVICES * RECORDS_PER_DEVICE:,} records, "
        f"30-day window: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms "
        f"(through the Django view: median {statistics.median(http_times):.1f} ms; "
        f"naive SUM over the records: {naive_ms:.0f} ms, same usage)"
    )
    print(f"  lines: {lines}; total {rated['total']} {rated['currency']}")
    print(f"  load {loaded:.0f} s, {time.monotonic() - begun:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
