"""The daily ``reconcile`` (no ``--deep``) at 10^6 usage records on PostgreSQL (issue 38:
it must stay under 5 s there).

Creates its own database (``svc_bench_reconcile``), CUSTOMERS customers of DEVICES
activated VISION-PRO units, and HOURS hourly records per camera (10 x 100 x 1000 =
10^6 by default) bulk-inserted into the monthly partitions with their daily rollups
(as ingestion sums them). Then it times ``manage.py reconcile`` (every customer, the
stored run the dashboard shows) RUNS times, and ``reconcile --deep`` once, and checks
that an inflated rollup fails the daily run.

Run from the repository root: ``python bench/bench_reconcile.py`` (or ``make bench``).
Settings: BENCH_PG (server URL without database), BENCH_RECONCILE_DEVICES (per customer,
default 100), BENCH_RECONCILE_HOURS (records per camera, default 1000).
"""

from __future__ import annotations

import datetime as dt
import io
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
DB_NAME = os.environ.get("BENCH_RECONCILE_DB", "svc_bench_reconcile")
CUSTOMERS = 10
DEVICES = int(os.environ.get("BENCH_RECONCILE_DEVICES", "100"))
HOURS = int(os.environ.get("BENCH_RECONCILE_HOURS", "1000"))
RUNS = 3


def fleet(first_hour: int) -> list[str]:
    """The customers' ids; their units activated a day before the first record."""
    from django.db import connection, transaction

    from customers.services import customer_create
    from licensing.services import batch_issue
    from licensing.services.activation import unit_activate

    out = []
    for c in range(CUSTOMERS):
        customer = customer_create(name=f"Fleet {c}", kind="oem", id=f"FLEET{c:02d}")
        batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=DEVICES)
        for n in range(DEVICES):
            unit_activate(batch_token=batch.license.token, device_id=f"c{c}-cam-{n:04d}")
        out.append(customer.id)
    activated = dt.datetime.fromtimestamp(first_hour - 86_400, tz=dt.UTC)
    with transaction.atomic(), connection.cursor() as cursor:
        # Dating the fleet back rewrites what billing reads: a declared repair.
        cursor.execute("SELECT set_config('billing.maintenance', 'on', true)")
        cursor.execute("UPDATE licensing_activation SET activated_at = %s", [activated])
        cursor.execute("UPDATE licensing_license SET issued_at = %s", [activated])
    return out


def load(customers: list[str], first_hour: int) -> float:
    """The records and their rollups, in one transaction per customer; returns s."""
    from django.db import connection, transaction

    started = time.perf_counter()
    for customer_id in customers:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL work_mem = '64MB'")
            _support.load_hourly_usage(cursor, customer_id, first_hour, HOURS)
    loaded = time.perf_counter() - started
    connection.connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return loaded


def reconcile(*args: str) -> tuple[float, int]:
    """Seconds and exit status of ``manage.py reconcile`` in this process."""
    from django.core.management import CommandError, call_command

    started = time.perf_counter()
    try:
        call_command("reconcile", *args, stdout=io.StringIO(), stderr=io.StringIO())
        status = 0
    except CommandError:
        status = 1
    return time.perf_counter() - started, status


def main() -> int:
    begun = time.monotonic()
    _support.recreate_database(PG, DB_NAME)
    with tempfile.TemporaryDirectory() as tmp:
        _support.configure_django(Path(tmp), PG, DB_NAME)
        from django.db import connection

        from billing import partitions
        from billing.limits import month_start, next_month, start_of_day, unix
        from billing.models import UsageRecord

        today = start_of_day()
        last_hour = unix(today) - 86_400
        first_hour = last_hour - HOURS * 3600
        months, month = [], month_start(dt.datetime.fromtimestamp(first_hour, tz=dt.UTC).date())
        while month <= today.date():
            months.append(month)
            month = next_month(month)
        partitions.partitions_ensure(months)
        customers = fleet(first_hour)
        loaded_s = load(customers, first_hour)
        total = UsageRecord.objects.count()

        daily = []
        for _ in range(RUNS):
            seconds, status = reconcile()
            assert status == 0, "a clean ledger must reconcile"
            daily.append(seconds)
        deep_s, status = reconcile("--deep")
        assert status == 0, "a clean ledger must reconcile --deep"

        # The issue's inflation, with every trigger bypassed (as a superuser could):
        # the daily run must now fail.
        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SET LOCAL session_replication_role = replica")
            cursor.execute(
                "UPDATE billing_usagedaily SET inferences = inferences + 5000000, "
                "records = records + 1 WHERE id = (SELECT min(id) FROM billing_usagedaily)"
            )
            cursor.execute("COMMIT")
        tampered_s, tampered = reconcile()
        connection.close()
    _support.recreate_database(PG, DB_NAME, create=False)

    print(
        f"daily reconcile at {total:,} usage records ({CUSTOMERS} customers x {DEVICES} "
        f"cameras x {HOURS:,} hours; loaded in {loaded_s:.0f} s): median "
        f"{statistics.median(daily):.2f} s, max {max(daily):.2f} s over {RUNS} runs "
        f"(limit 5 s); --deep {deep_s:.2f} s"
    )
    print(
        f"  after inflating one rollup by 5,000,000 inferences: exit {tampered} "
        f"({tampered_s:.2f} s)"
    )
    print(f"  {os.cpu_count()} CPUs; {time.monotonic() - begun:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
