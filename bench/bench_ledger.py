"""Billing ledger benchmark: 10^7 usage records on PostgreSQL, monthly partitions.

Creates its own database (``svc_bench_ledger``), activates CUSTOMERS x DEVICES cameras
through the licensing service (activations dated before the data), then:

1. load: 10^7 hourly records (DEVICES x HOURS per customer, ~14 months) bulk-inserted
   with ``generate_series`` into the monthly partitions, and their daily rollups;
2. issue: every month's invoices for all customers (``invoice_issue_all``; the first
   one bills the backlog), timed per run;
3. ingest: LATE_CALLS x 1000-record ``usage_ingest`` calls (the production statement,
   one connection) on top of the 10^7 rows, for half-hours of invoiced months (devices
   that were offline), then the next invoice that bills them as late usage;
4. rating: ``invoice_rate`` of a 30-day window per customer (contract §6);
5. reconcile over everything (rollups and ledger), and ``--deep`` (every record);
6. prune: ``usage_prune --older-than-months 3`` drops the months billed and reconciled.

Run from the repository root: ``python bench/bench_ledger.py`` (or ``make bench``).
Settings: BENCH_PG (server URL without database), BENCH_LEDGER_DEVICES (per customer,
default 100), BENCH_LEDGER_HOURS (records per device, default 10 000).
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

from devices.bounds import MAX_RECORDS_PER_UPLOAD  # noqa: E402

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = os.environ.get("BENCH_LEDGER_DB", "svc_bench_ledger")
CUSTOMERS = 10
DEVICES = int(os.environ.get("BENCH_LEDGER_DEVICES", "100"))
HOURS = int(os.environ.get("BENCH_LEDGER_HOURS", "10000"))
LATE_CALLS = 200
RECORDS_PER_CALL = MAX_RECORDS_PER_UPLOAD  # what the service processes per call


def recreate_database(*, create: bool = True) -> None:
    _support.recreate_database(PG, DB_NAME, create=create)


def configure(tmp: Path) -> None:
    _support.configure_django(tmp, PG, DB_NAME)


def fleet(first_hour: int) -> list[tuple[str, list]]:
    """CUSTOMERS customers of DEVICES activated VISION-PRO units each, activated a day
    before the first record. Returns (customer id, units)."""
    from django.db import connection, transaction

    from customers.services import customer_create
    from licensing.models import License
    from licensing.services import batch_issue
    from licensing.services.activation import unit_activate

    out = []
    for c in range(CUSTOMERS):
        customer = customer_create(name=f"Fleet {c}", kind="oem", id=f"FLEET{c:02d}")
        batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=DEVICES)
        for n in range(DEVICES):
            unit_activate(batch_token=batch.license.token, device_id=f"c{c}-cam-{n:04d}")
        units = list(License.objects.filter(batch_id=batch.id).order_by("device_id"))
        out.append((customer.id, units))
    activated = dt.datetime.fromtimestamp(first_hour - 86_400, tz=dt.UTC)
    with transaction.atomic(), connection.cursor() as cursor:
        # Dating the fleet back rewrites what billing reads: a declared repair.
        cursor.execute("SELECT set_config('billing.maintenance', 'on', true)")
        cursor.execute("UPDATE licensing_activation SET activated_at = %s", [activated])
        cursor.execute("UPDATE licensing_license SET issued_at = %s", [activated])
    return out


def load(customers: list[str], first_hour: int) -> float:
    """The records (by SQL, as ingestion stores them) and their rollups; returns s."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '256MB'")
        cursor.execute("SET work_mem = '64MB'")
        for customer_id in customers:
            _support.load_hourly_usage(cursor, customer_id, first_hour, HOURS)
    loaded = time.perf_counter() - started
    connection.connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return loaded


def main() -> int:
    begun = time.monotonic()
    recreate_database()
    with tempfile.TemporaryDirectory() as tmp:
        configure(Path(tmp))
        from django.db import connection
        from django.db.models import Sum

        from billing import partitions
        from billing.ingestion import usage_ingest
        from billing.issuing import invoice_issue_all
        from billing.limits import midnight, month_start, next_month, start_of_day, unix
        from billing.models import Invoice, InvoiceLine, UsageRecord
        from billing.rating import invoice_rate
        from billing.reconciliation import ledger_reconcile

        today = start_of_day()
        last_hour = unix(today) - 86_400
        first_hour = last_hour - HOURS * 3600
        months, month = [], month_start(dt.datetime.fromtimestamp(first_hour, tz=dt.UTC).date())
        while month <= today.date():
            months.append(month)
            month = next_month(month)
        partitions.partitions_ensure(months)

        started = time.perf_counter()
        customers = fleet(first_hour)
        fleet_s = time.perf_counter() - started
        loaded_s = load([cid for cid, _ in customers], first_hour)
        total = UsageRecord.objects.count()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'billing_usagerecord'::regclass"
            )
            (parts,) = cursor.fetchone()

        # Every month's invoices but the last: the first bills the backlog.
        issue_times = []
        ends = [midnight(m) for m in months[1:-1]]
        for end in ends:
            started = time.perf_counter()
            results = invoice_issue_all(period_days=31, end=end)
            issue_times.append(time.perf_counter() - started)
            assert sum(1 for result in results if result.invoice) == CUSTOMERS, results

        # Cameras that were offline upload half-hours of invoiced months, late.
        late_from = unix(ends[-2])
        calls = []
        for k in range(LATE_CALLS):
            customer_id, units = customers[k % CUSTOMERS]
            unit = units[(k // CUSTOMERS) % DEVICES]
            base = late_from + ((k // (CUSTOMERS * DEVICES)) * RECORDS_PER_CALL) * 3600 + 1800
            records = [
                {"period_start": base + i * 3600, "period_end": base + i * 3600 + 1800,
                 "inferences": 500, "frames": 27_000, "stream_seconds": 1800, "events": 1}
                for i in range(RECORDS_PER_CALL)
            ]  # fmt: skip
            calls.append((unit, records))
        call_ms = []
        started = time.perf_counter()
        for unit, records in calls:
            began = time.perf_counter()
            answer = usage_ingest(token=unit.token, device_id=unit.device_id, records=records)
            call_ms.append((time.perf_counter() - began) * 1000)
            assert answer["accepted"] == RECORDS_PER_CALL, answer
        ingest_s = time.perf_counter() - started
        ingest_rate = LATE_CALLS * RECORDS_PER_CALL / ingest_s

        started = time.perf_counter()
        results = invoice_issue_all(period_days=31, end=midnight(months[-1]))
        last_issue_s = time.perf_counter() - started
        late_lines = InvoiceLine.objects.filter(kind="metered_overage_late").count()
        late_billed = Invoice.objects.filter(period_end=midnight(months[-1])).aggregate(
            n=Sum("usage__late_inferences")
        )["n"]

        rate_ms = []
        for customer_id, _ in customers:
            for _ in range(3):
                began = time.perf_counter()
                invoice_rate(customer_id=customer_id, period_days=30)
                rate_ms.append((time.perf_counter() - began) * 1000)

        started = time.perf_counter()
        result = ledger_reconcile()
        reconcile_s = time.perf_counter() - started
        assert result.ok, result.problems
        totals = result.totals()

        started = time.perf_counter()
        checks = partitions.usage_prune(older_than_months=3)
        prune_s = time.perf_counter() - started
        pruned = [check for check in checks if check.prunable]
        kept = [check for check in checks if not check.prunable]
        started = time.perf_counter()
        deep = ledger_reconcile(deep=True)
        deep_s = time.perf_counter() - started
        assert deep.ok, deep.problems
        remaining = UsageRecord.objects.count()
        connection.close()
    recreate_database(create=False)

    print(
        f"ledger at {total:,} usage records ({CUSTOMERS} customers x {DEVICES} cameras x "
        f"{HOURS:,} hours, {parts} partitions): bulk load {loaded_s:.0f} s "
        f"({total / loaded_s:,.0f} records/s with rollups; fleet set-up {fleet_s:.0f} s)"
    )
    print(
        f"  ingest on top of it: {ingest_rate:,.0f} records/s through usage_ingest, one "
        f"connection, 1000-record calls (median {statistics.median(call_ms):.1f} ms)"
    )
    print(
        f"  issuing {CUSTOMERS} invoices: first run (backlog) {issue_times[0]:.2f} s, monthly "
        f"runs median {statistics.median(issue_times[1:]):.2f} s, with "
        f"{LATE_CALLS * RECORDS_PER_CALL:,} late records {last_issue_s:.2f} s "
        f"({late_billed:,} late inferences in {late_lines} metered_overage_late lines)"
    )
    print(
        f"  rating a 30-day window (contract §6): median {statistics.median(rate_ms):.1f} ms, "
        f"max {max(rate_ms):.1f} ms per customer"
    )
    print(
        f"  reconcile {reconcile_s:.2f} s ({totals.billed:,} of {totals.inferences:,} "
        f"inferences billed, {totals.waiting:,} waiting); prune --older-than-months 3 "
        f"{prune_s:.1f} s ({len(pruned)} months dropped, {len(kept)} kept, "
        f"{remaining:,} records left); reconcile --deep {deep_s:.1f} s"
    )
    print(f"  {os.cpu_count()} CPUs; {time.monotonic() - begun:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
