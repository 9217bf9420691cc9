"""Ledger audit benchmark (issue 23): ``reconcile`` and ``reconcile --deep`` on 10^7 usage
records and 10^5 issued invoices, beside the time to issue them, on PostgreSQL.

Creates its own database (``svc_bench_audit``):

1. the fleet of ``bench_ledger``: 10 customers x 100 cameras x 10,000 hourly records
   (10^7 records, monthly partitions) and their rollups, by SQL;
2. MANY small customers (default 10,000), each a DETECT-STD direct licence and one
   usage record of 100,000 inferences a month (over the allowance: every month owes);
3. issuing: MONTHS (default 10) monthly runs of ``invoice_issue_all`` over every
   customer: MONTHS x (MANY + 10) invoices, timed per run;
4. ``reconcile`` (money, quantities, numbering, overlaps: every document) and
   ``reconcile --deep`` (every invoice rated again, rollups against records).

Run from the repository root: ``python bench/bench_audit.py`` (or ``make bench``).
Settings: BENCH_PG, BENCH_AUDIT_CUSTOMERS (default 10,000), BENCH_AUDIT_MONTHS
(default 10), BENCH_LEDGER_DEVICES / BENCH_LEDGER_HOURS (the 10^7 fleet).
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
import bench_ledger  # noqa: E402 - the 10^7-record fleet

PG = bench_ledger.PG
DB_NAME = os.environ.get("BENCH_AUDIT_DB", "svc_bench_audit")
MANY = int(os.environ.get("BENCH_AUDIT_CUSTOMERS", "10000"))
MONTHS = int(os.environ.get("BENCH_AUDIT_MONTHS", "10"))


def small_customers(before: dt.datetime, month_starts: list[dt.date]) -> float:
    """MANY customers with one direct licence each, dated ``before``, and a record of
    100,000 inferences on the 3rd of every month; returns seconds."""
    from django.db import connection, transaction

    from customers.models import Customer
    from licensing.services import license_issue

    started = time.perf_counter()
    Customer.objects.bulk_create(
        Customer(id=f"SMALL{n:06d}", name=f"Small customer {n:06d}", kind="end_user")
        for n in range(MANY)
    )
    for n in range(MANY):
        license_issue(customer_id=f"SMALL{n:06d}", sku="DETECT-STD", device_id=f"small-{n:06d}")
    starts = [int(dt.datetime(d.year, d.month, 3, tzinfo=dt.UTC).timestamp()) for d in month_starts]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('billing.maintenance', 'on', true)")
        cursor.execute(
            "UPDATE licensing_license SET issued_at = %s WHERE customer_id LIKE 'SMALL%%'",
            [before],
        )
        cursor.execute(
            """
            INSERT INTO billing_usagerecord (license_id, customer_id, sku, device_id,
                received_at, period_start, period_end, inferences, frames, stream_seconds,
                events)
            SELECT l.id, l.customer_id, l.sku, l.device_id, to_timestamp(s + 3600), s,
                s + 3600, 100000, 0, 0, 0
            FROM licensing_license l CROSS JOIN unnest(%s::bigint[]) s
            WHERE l.customer_id LIKE 'SMALL%%'
            """,
            [starts],
        )
        cursor.execute(
            """
            INSERT INTO billing_usagedaily (license_id, customer_id, sku, day, records,
                inferences, frames, stream_seconds, events)
            SELECT license_id, customer_id, sku,
                DATE '1970-01-01' + (period_start / 86400)::int, count(*), sum(inferences),
                0, 0, 0
            FROM billing_usagerecord WHERE customer_id LIKE 'SMALL%%' GROUP BY 1, 2, 3, 4
            """
        )
    return time.perf_counter() - started


def main() -> int:
    begun = time.monotonic()
    _support.recreate_database(PG, DB_NAME)
    with tempfile.TemporaryDirectory() as tmp:
        _support.configure_django(Path(tmp), PG, DB_NAME)
        from django.db import connection

        from billing import partitions
        from billing.issuing import invoice_issue_all
        from billing.limits import midnight, month_start, next_month, start_of_day, unix
        from billing.models import Invoice, InvoiceLine, UsageRecord
        from billing.reconciliation import ledger_reconcile

        today = start_of_day()
        last_hour = unix(today) - 86_400
        first_hour = last_hour - bench_ledger.HOURS * 3600
        months, month = [], month_start(dt.datetime.fromtimestamp(first_hour, tz=dt.UTC).date())
        while month <= today.date():
            months.append(month)
            month = next_month(month)
        partitions.partitions_ensure(months)
        # Invoice periods: the last MONTHS whole months before this one.
        ends = [midnight(m) for m in months[-MONTHS:]]
        fleet = bench_ledger.fleet(first_hour)
        loaded_s = bench_ledger.load([cid for cid, _ in fleet], first_hour)
        small_s = small_customers(
            dt.datetime.fromtimestamp(first_hour - 86_400, tz=dt.UTC),
            [m for m in months[-MONTHS - 1 : -1]],
        )
        connection.connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        records = UsageRecord.objects.count()

        issue_s = []
        for end in ends:
            started = time.perf_counter()
            # The fleet first (the first run bills its backlog: most ledger entries),
            # then its entries analysed as autovacuum would, then every customer.
            issued = 0
            for customer_id, _ in fleet:
                results = invoice_issue_all(period_days=31, end=end, customer_id=customer_id)
                issued += sum(1 for result in results if result.invoice)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE billing_ledgerentry")
            results = invoice_issue_all(period_days=31, end=end)
            issue_s.append(time.perf_counter() - started)
            issued += sum(1 for result in results if result.invoice)
            print(f"  issued {issued:,} invoices ending {end:%Y-%m-%d} in {issue_s[-1]:.0f} s",
                  flush=True)  # fmt: skip
            with connection.cursor() as cursor:  # as autovacuum would, between runs
                cursor.execute("ANALYZE billing_ledgerentry")
        invoices = Invoice.objects.count()
        lines = InvoiceLine.objects.count()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")

        started = time.perf_counter()
        result = ledger_reconcile()
        reconcile_s = time.perf_counter() - started
        assert result.ok, result.problems[:5]
        started = time.perf_counter()
        deep = ledger_reconcile(deep=True)
        deep_s = time.perf_counter() - started
        assert deep.ok, deep.problems[:5]
        connection.close()
    _support.recreate_database(PG, DB_NAME, create=False)

    print(
        f"audit at {records:,} usage records and {invoices:,} invoices ({lines:,} lines; "
        f"{len(fleet)} fleet customers + {MANY:,} small ones, {MONTHS} monthly runs): "
        f"load {loaded_s + small_s:.0f} s"
    )
    print(
        f"  issuing: {sum(issue_s):.0f} s in all, a monthly run median "
        f"{statistics.median(issue_s):.0f} s ({sum(issue_s) / invoices * 1000:.1f} ms an invoice)"
    )
    print(
        f"  reconcile {reconcile_s:.1f} s (every document's money, quantities, numbers and "
        f"periods; {reconcile_s / sum(issue_s) * 100:.1f}% of the time to issue them); "
        f"reconcile --deep {deep_s:.1f} s (every invoice rated again, rollups against "
        f"records; {deep_s / sum(issue_s) * 100:.0f}%)"
    )
    print(f"  {os.cpu_count()} CPUs; {time.monotonic() - begun:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
