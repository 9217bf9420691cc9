"""Usage ingestion benchmark: POST /v1/usage through gunicorn on PostgreSQL.

Creates its own database (``svc_bench_usage``), activates a fleet of cameras, then:

1. throughput: many 1000-record calls from a multi-threaded client against gunicorn;
2. latency: the median of single 1000-record calls, one at a time;
3. floor: the same number of rows inserted by raw SQL (one process, one connection,
   1000-row ``INSERT ... ON CONFLICT DO NOTHING`` statements, one commit each).

On PostgreSQL the records table is partitioned by month (billing.partitions); the
bench creates the partitions of the months its records use.

Every record lies within its licence's life (contract §7): the records are hourly and
end before now, from T0 (about two years ago, as many hours as the run needs), and the
fleet's licences are back-dated to a day before T0 in the bench's own database.

Run from the repository root: ``python bench/bench_usage.py`` (or ``make bench``).
Settings: BENCH_PG (server URL without database), BENCH_WORKERS, BENCH_THREADS,
BENCH_CLIENTS, BENCH_CALLS.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script

from devices.bounds import MAX_RECORDS_PER_UPLOAD  # noqa: E402

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = os.environ.get("BENCH_USAGE_DB", "svc_bench_usage")
WORKERS = int(os.environ.get("BENCH_WORKERS", "4"))
THREADS = int(os.environ.get("BENCH_THREADS", "1"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "6"))
CALLS = int(os.environ.get("BENCH_CALLS", "400"))
LATENCY_CALLS = 60
RECORDS_PER_CALL = MAX_RECORDS_PER_UPLOAD  # what the service processes per call
DEVICES = 32
HOUR = 3600
WARMUP_CALLS = 2 * WORKERS * max(THREADS, 1)
# Each device uploads, per call, the next RECORDS_PER_CALL hours of its own: this many
# slices for the warm-up, the load and the latency calls (see main's offsets).
SLICES = sum(calls // DEVICES + 1 for calls in (WARMUP_CALLS, CALLS, LATENCY_CALLS))
# On an hour, so that the last slice ends at least an hour before now.
T0 = (int(time.time()) // HOUR - SLICES * RECORDS_PER_CALL - 1) * HOUR


def recreate_database(*, create: bool = True) -> None:
    _support.recreate_database(PG, DB_NAME, create=create)


def environment(tmp: Path) -> dict[str, str]:
    from svccore.keyfile import write_private_key

    key = tmp / "signing-key.pem"
    write_private_key(key)
    return {
        **os.environ,
        "DATABASE_URL": f"{PG}/{DB_NAME}",
        "SVC_SECRET_KEY": secrets.token_urlsafe(32),
        "SVC_ADMIN_KEY": secrets.token_urlsafe(16),
        "SVC_SIGNING_KEY_FILE": str(key),
        "SVC_DEBUG": "0",
        "SVC_SSL_REDIRECT": "0",
        "SVC_LOG_LEVEL": "WARNING",
        "SVC_ENV_FILE": "",  # never the development server's var/dev.env
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }


def setup_fleet(env: dict[str, str]) -> list[tuple[str, str]]:
    """Migrate, then activate DEVICES cameras; returns (device_id, unit token) pairs."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=REPO, env=env, check=True,
    )  # fmt: skip
    os.environ.update(env)
    import django

    django.setup()
    from django.db import connection, transaction

    from billing.limits import month_start, next_month
    from billing.partitions import partitions_ensure
    from customers.services import customer_create
    from licensing.models import Activation, License
    from licensing.services import batch_issue
    from licensing.services.activation import unit_activate

    # The records below span the years from T0 to now; give each month its partition, as
    # the monthly maintenance (prune_usage) does in production, instead of the default one.
    start = dt.datetime.fromtimestamp(T0, dt.UTC).date()
    end = dt.datetime.fromtimestamp(time.time(), dt.UTC).date()
    months, month = [], month_start(start)
    while month <= end:
        months.append(month)
        month = next_month(month)
    partitions_ensure(months)
    customer = customer_create(name="Bench fleet", kind="oem", id="BENCH")
    batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=DEVICES + 1)
    fleet = []
    for n in range(DEVICES):
        device_id = f"bench-cam-{n:04d}"
        unit = unit_activate(batch_token=batch.license.token, device_id=device_id)
        fleet.append((device_id, unit.token))
    # Activated, on paper, a day before T0: the records lie within the licences' life.
    # This rewrites what billing reads, which PostgreSQL allows only in a declared repair
    # (billing migration 0009); this database is the bench's own.
    before = dt.datetime.fromtimestamp(T0, dt.UTC) - dt.timedelta(days=1)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('billing.maintenance', 'on', true)")
        Activation.objects.filter(license__customer=customer).update(activated_at=before)
        License.objects.filter(customer=customer, kind=License.Kind.UNIT).update(issued_at=before)
    connection.close()
    return fleet


def bodies(fleet: list[tuple[str, str]], calls: int, offset: int) -> list[tuple[str, bytes]]:
    """Pre-encoded request bodies: call k goes to device k % DEVICES with 1000 fresh
    hourly records, so every record is new (the dedup index still checks each one)."""
    out = []
    for k in range(calls):
        device_id, token = fleet[k % len(fleet)]
        base = T0 + (offset + k // len(fleet)) * RECORDS_PER_CALL * HOUR
        records = [
            {
                "period_start": base + i * HOUR,
                "period_end": base + (i + 1) * HOUR,
                "inferences": 1000 + i,
                "frames": 54_000,
                "stream_seconds": 3600,
                "events": i % 7,
            }
            for i in range(RECORDS_PER_CALL)
        ]
        body = {"device_id": device_id, "license_id": "ignored", "records": records}
        out.append((token, json.dumps(body).encode()))
    return out


def start_gunicorn(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    env = env | {"SVC_DB_CONN_MAX_AGE": "600"}
    return _support.start_gunicorn(env, port, log, workers=WORKERS, threads=THREADS, timeout=60)


def post(conn: http.client.HTTPConnection, token: str, body: bytes) -> dict:
    conn.request(
        "POST", "/v1/usage", body=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )  # fmt: skip
    response = conn.getresponse()
    payload = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {payload[:300]!r}")
    return json.loads(payload)


def run_clients(port: int, work: list[tuple[str, bytes]], clients: int) -> tuple[float, int]:
    """Send every body once from ``clients`` keep-alive connections; returns (seconds,
    records accepted)."""
    lock = threading.Lock()
    queue = list(reversed(work))
    accepted = [0]
    errors: list[BaseException] = []

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    token, body = queue.pop()
                result = post(conn, token, body)
                if result["refused"] or result["conflicts"]:
                    raise RuntimeError(f"records refused or in conflict: {result}")
                with lock:
                    accepted[0] += result["accepted"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed, accepted[0]


def latency(port: int, work: list[tuple[str, bytes]]) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    for token, body in work:
        started = time.perf_counter()
        result = post(conn, token, body)
        times.append((time.perf_counter() - started) * 1000)
        assert result["accepted"] == RECORDS_PER_CALL, result
    conn.close()
    return times


def raw_sql(total_records: int) -> float:
    """Records/s inserting ``total_records`` fresh rows by raw SQL from one process."""
    import psycopg

    rows_per = RECORDS_PER_CALL
    with psycopg.connect(f"{PG}/{DB_NAME}") as conn:
        lic, customer = conn.execute(
            "SELECT id, customer_id FROM licensing_license WHERE kind = 'unit' LIMIT 1"
        ).fetchone()
        statement = (
            "INSERT INTO billing_usagerecord (license_id, customer_id, sku, device_id, "
            "received_at, period_start, period_end, inferences, frames, stream_seconds, events) "
            "SELECT %s, %s, 'VISION-PRO', %s, now(), * FROM unnest(%s::bigint[], %s::bigint[], "
            "%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]) "
            "ON CONFLICT (license_id, period_start, period_end) DO NOTHING "
            "RETURNING period_start, period_end"
        )
        batches = []
        for k in range(total_records // rows_per):
            # The periods the HTTP run used, under licences of their own (the key is
            # the licence and the period; the column has no foreign key): fresh rows in
            # the same months (partitions).
            base = T0 + (k // DEVICES) * rows_per * HOUR
            starts = [base + i * HOUR for i in range(rows_per)]
            batches.append(
                (
                    f"LIC-RAWFLOOR{k % DEVICES:04d}",
                    customer,
                    f"raw-{k % DEVICES}",
                    starts,
                    [s + HOUR for s in starts],
                    [1000 + i for i in range(rows_per)],
                    [54_000] * rows_per,
                    [3600] * rows_per,
                    [i % 7 for i in range(rows_per)],
                )  # fmt: skip
            )
        started = time.perf_counter()
        for params in batches:
            with conn.cursor() as cursor:
                cursor.execute(statement, params)
                assert len(cursor.fetchall()) == rows_per
            conn.commit()
        return total_records / (time.perf_counter() - started)


def main() -> int:
    started = time.monotonic()
    recreate_database()
    with tempfile.TemporaryDirectory() as tmp:
        env = environment(Path(tmp))
        fleet = setup_fleet(env)
        warmup = bodies(fleet, WARMUP_CALLS, offset=0)
        offset = len(warmup) // len(fleet) + 1
        load = bodies(fleet, CALLS, offset=offset)
        offset += CALLS // len(fleet) + 1
        single = bodies(fleet, LATENCY_CALLS, offset=offset)
        port = _support.free_port()
        server = start_gunicorn(env, port, Path(tmp) / "gunicorn.log")
        try:
            run_clients(port, warmup, CLIENTS)
            elapsed, accepted = run_clients(port, load, CLIENTS)
            assert accepted == CALLS * RECORDS_PER_CALL, accepted
            times = latency(port, single)
        finally:
            server.terminate()
            server.wait(timeout=10)
        http_rate = accepted / elapsed
        raw_rate = raw_sql(accepted)
    recreate_database(create=False)
    print(
        f"usage ingest via HTTP: {http_rate:,.0f} records/s "
        f"(raw SQL, one connection: {raw_rate:,.0f} records/s, ratio {http_rate / raw_rate:.2f}); "
        f"1000-record call median {statistics.median(times):.1f} ms "
        f"(p90 {statistics.quantiles(times, n=10)[-1]:.1f} ms)"
    )
    print(
        f"  {accepted:,} records in {CALLS} calls from {CLIENTS} client threads; gunicorn "
        f"{WORKERS} workers x {THREADS} threads; {os.cpu_count()} CPUs; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
