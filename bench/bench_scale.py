"""Operator reads at fleet scale (issue 15): a generated fleet of 10^7 unit licences and
activations, 10^5 revocations and 10^7 usage records on PostgreSQL, and the time of
every read an operator makes of it, printed as one table.

The set (``svc_scale``, its own database; dropped at the end unless ``--keep``):

- 10 customers; batches, direct licences, seat releases and their replacement
  activations go through the services (so they are real, signed and audited);
- the units: 10^7 licences with their activations, written by ``INSERT ... SELECT FROM
  generate_series`` in chunks of a million (one progress line each), in time order:
  89.9 % spread over 17 batches from 730 to 30 days ago, 0.1 % on a small customer's
  batch over the last year, and 10 % on one batch of the big customer (CUST-SCALE)
  inside the last 30 days, so that customer has 10^6 activations in a 30-day invoice
  window. Device ids are ``scale-<n>`` (the issue's search ``scale-77`` matches 111,111
  of them by prefix), 1 % weakly bound (MAC). A licence holds short placeholder
  claims and token: this is a read benchmark, nothing verifies them;
- 1 % of the units revoked (10^5), each on the revocation list;
- 10^7 hourly usage records of 1000 of the big customer's units (10^4 hours back from
  the last whole hour), with their daily rollups;
- one issued invoice (for CUST-C01: about 10^6 activations on the ledger).

Bulk rows go in with ``session_replication_role = replica`` (no per-row foreign-key
checks or triggers) and without the secondary indexes, which are rebuilt afterwards;
the activation rollups are then filled by one ``INSERT ... SELECT`` and checked
against the activations, and everything is ``VACUUM ANALYZE``d.

Then one gunicorn (2 workers x 4 gthread threads, as the issue measured) serves it,
and every read is timed over HTTP, logged in as a superuser (admin pages) or with the
admin key (API): the median of RUNS after a warm-up, the slowest, the answer's size,
the queries the page ran (from ``CaptureQueriesContext`` in this process, on the same
database) and, where one makes sense, a floor: the hand-written SQL of the same read,
timed on its own (for the invoice, the row-by-row count of the window's activations
that the rollups replace). One stored ledger reconciliation is run and timed first, so
the dashboard shows a full ledger panel. Targets: admin pages 300 ms, invoice rating
50 ms, fleet pages 100 ms; a read over its target is marked OVER (reported, not a
failure). The CSV export
of a fleet is streamed: its rows per second and the serving worker's peak RSS for a
small and a large fleet show its memory does not grow with the fleet.

Run from the repository root: ``python bench/bench_scale.py`` (or ``make bench``, or
``python -m bench scale``). Options: ``--licences N`` (default 10^7; every part of the
set scales with it), ``--keep`` (leave the database), ``--reuse`` (measure a kept
database without loading it again; migrations still run), ``--only TEXT`` (time only
the reads whose name holds TEXT; repeatable; no CSV exports). Setting: BENCH_PG (server
URL without database), BENCH_RUNS, BENCH_SCALE_DB (the database's name, ``svc_scale``
unless set: two checkouts on one server, two sets). 10^7 takes about 15 minutes to
load on two cores and needs about 15 GB of disk. The data set and its loading:
``bench/_scale_data.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script
from _scale_data import BIG, DB_NAME, PG, SMALL, Plan, load  # noqa: E402 - beside this script

RUNS = int(os.environ.get("BENCH_RUNS", "10"))

PAGE_TARGET_MS = 300.0
RATING_TARGET_MS = 50.0
FLEET_TARGET_MS = 100.0


@dataclass
class Read:
    name: str
    path: str
    auth: str  # "page" (logged-in operator), "api" (X-Admin-Key), "device" (none)
    target_ms: float | None
    floor_sql: str | None = None
    median_ms: float = 0.0
    max_ms: float = 0.0
    size: int = 0
    queries: int | None = None
    floor_ms: float | None = None
    status: int = 0


def machine() -> str:
    import psycopg

    with psycopg.connect(f"{PG}/{DB_NAME}") as conn:
        version, buffers = conn.execute(
            "SELECT current_setting('server_version'), current_setting('shared_buffers')"
        ).fetchone()
    return f"{os.cpu_count()} CPUs; PostgreSQL {version}; shared_buffers {buffers}"


# --- the reads ----------------------------------------------------------------------


def _sample(cursor, sql: str) -> str:
    cursor.execute(sql)
    return cursor.fetchone()[0]


def reads(plan: Plan) -> list[Read]:
    """Every read to time: the issue's, the filters and searches of the big lists, and
    every other changelist of the admin."""
    from django.contrib import admin
    from django.db import connection
    from django.urls import reverse

    with connection.cursor() as cursor:
        license = _sample(cursor, "SELECT id FROM licensing_license WHERE kind = 'unit' "
                                  "ORDER BY id OFFSET 5000 LIMIT 1")  # fmt: skip
        big_batch = _sample(cursor, f"SELECT id FROM licensing_batch WHERE customer_id = '{BIG}' "  # noqa: S608
                                    "ORDER BY units_purchased DESC LIMIT 1")  # fmt: skip
    recent = "ORDER BY issued_at DESC, id DESC LIMIT 100"
    fleet_order = "ORDER BY activated_at DESC, id DESC LIMIT 100"
    found = [
        Read("licence list", "/admin/licensing/license/", "page", PAGE_TARGET_MS,
             f"SELECT * FROM licensing_license {recent}"),  # noqa: S608
        Read("licence search ?q=scale-77", "/admin/licensing/license/?q=scale-77", "page",
             PAGE_TARGET_MS,
             "SELECT * FROM licensing_license WHERE device_id COLLATE \"C\" LIKE 'scale-77%%' "
             "ORDER BY device_id COLLATE \"C\", id DESC LIMIT 100"),
        Read("licence search, exact id", f"/admin/licensing/license/?q={license}", "page",
             PAGE_TARGET_MS),
        Read("licence search, customer id", f"/admin/licensing/license/?q={SMALL}", "page",
             PAGE_TARGET_MS),
        Read("licences of a customer", f"/admin/licensing/license/?customer__id__exact={SMALL}",
             "page", PAGE_TARGET_MS),
        Read("licences, kind direct", "/admin/licensing/license/?kind__exact=direct", "page",
             PAGE_TARGET_MS),
        Read("licences, revoked", "/admin/licensing/license/?revoked=yes", "page",
             PAGE_TARGET_MS),
        Read("licences, SKU ANPR-PERPETUAL", "/admin/licensing/license/?sku=ANPR-PERPETUAL",
             "page", PAGE_TARGET_MS),
        Read("licences, SKU API-METERED (none)", "/admin/licensing/license/?sku=API-METERED",
             "page", PAGE_TARGET_MS),
        Read("licences, activation required",
             "/admin/licensing/license/?activation=required", "page", PAGE_TARGET_MS),
        Read("licences, issued this month", "/admin/licensing/license/?issued_at__gte="
             f"{dt.date.today().replace(day=1)}", "page", PAGE_TARGET_MS),
        Read("activation list", "/admin/licensing/activation/", "page", PAGE_TARGET_MS,
             f"SELECT * FROM licensing_activation {fleet_order}"),  # noqa: S608
        Read("activation search ?q=scale-77", "/admin/licensing/activation/?q=scale-77", "page",
             PAGE_TARGET_MS,
             "SELECT * FROM licensing_activation WHERE device_id COLLATE \"C\" LIKE 'scale-77%%' "
             "ORDER BY device_id COLLATE \"C\", id DESC LIMIT 100"),
        Read("activation search, batch id", f"/admin/licensing/activation/?q={big_batch}",
             "page", PAGE_TARGET_MS),
        Read("fleet of a customer (admin)",
             f"/admin/licensing/activation/?batch__customer__id__exact={SMALL}", "page",
             PAGE_TARGET_MS),
        Read("activations, weak binding", "/admin/licensing/activation/?weak_binding__exact=1",
             "page", PAGE_TARGET_MS),
        Read("activations, source machine-id",
             "/admin/licensing/activation/?fingerprint_source=machine-id", "page",
             PAGE_TARGET_MS),
        Read("activations, SKU DETECT-STD",
             "/admin/licensing/activation/?batch__sku=DETECT-STD", "page", PAGE_TARGET_MS),
        Read("dashboard", "/admin/dashboard/", "page", PAGE_TARGET_MS),
        Read("invoice preview page (console)",
             f"/admin/invoice-preview/?customer={BIG}&period_days=30", "page", PAGE_TARGET_MS),
        Read(f"invoice rating GET /v1/admin/invoice/{BIG}",
             f"/v1/admin/invoice/{BIG}?period_days=30", "api", RATING_TARGET_MS,
             "SELECT count(*) FROM licensing_activation a JOIN licensing_batch b "  # noqa: S608
             f"ON b.id = a.batch_id WHERE b.customer_id = '{BIG}' AND a.transfer_of_id IS NULL "
             "AND a.activated_at >= now() - interval '30 days'"),
        Read("fleet API, first page", "/v1/admin/fleet", "api", FLEET_TARGET_MS,
             "SELECT * FROM licensing_activation ORDER BY activated_at DESC, id DESC LIMIT 1001"),
        Read("fleet API, customer's first page", f"/v1/admin/fleet?customer_id={BIG}", "api",
             FLEET_TARGET_MS),
        Read("fleet API, weak binding", "/v1/admin/fleet?weak_binding=true", "api",
             FLEET_TARGET_MS),
        Read("GET /v1/revocations (full list)", "/v1/revocations", "device", None),
    ]  # fmt: skip
    named = {read.path.split("?")[0] for read in found}
    for model in admin.site._registry:
        opts = model._meta
        path = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        if path not in named:
            found.append(Read(f"{opts.verbose_name_plural} list", path, "page", PAGE_TARGET_MS))
    return found


def reconcile_once() -> float:
    """One stored ledger reconciliation (what ``manage.py reconcile`` and the dashboard's
    "Reconcile now" run), so the dashboard shows a full ledger panel; its seconds."""
    from billing.services import ledger_check_run

    started = time.monotonic()
    check = ledger_check_run()
    seconds = time.monotonic() - started
    print(
        f"ledger reconciliation (stored for the dashboard): {seconds:.1f} s, "
        f"{len(check.rows)} rows, {len(check.problems)} problems",
        flush=True,
    )
    return seconds


def _cursor_at(port: int, headers: dict[str, str], fraction: float) -> str:
    """A fleet cursor ``fraction`` of the way through the whole fleet, from the
    activation there (made as the service makes them)."""
    from licensing.models import Activation
    from licensing.selectors import fleet_cursor

    total = Activation.objects.order_by().count()
    record = Activation.objects.order_by("-activated_at", "-id")[int(total * fraction)]
    return fleet_cursor(record)


def _get(conn: http.client.HTTPConnection, path: str, headers: dict[str, str]):
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def time_reads(port: int, found: list[Read], headers: dict[str, dict[str, str]]) -> None:
    import psycopg
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    for read in found:
        status, body = _get(conn, read.path, headers[read.auth])  # warm
        times = []
        for _ in range(RUNS):
            started = time.perf_counter()
            status, body = _get(conn, read.path, headers[read.auth])
            times.append((time.perf_counter() - started) * 1000)
        read.status, read.size = status, len(body)
        read.median_ms, read.max_ms = statistics.median(times), max(times)
        if read.auth == "page":
            read.queries = _queries_of(read.path, CaptureQueriesContext, connection)
        if read.floor_sql:
            with psycopg.connect(f"{PG}/{DB_NAME}") as db:
                db.execute(read.floor_sql).fetchall()
                floor = []
                for _ in range(RUNS):
                    started = time.perf_counter()
                    db.execute(read.floor_sql).fetchall()
                    floor.append((time.perf_counter() - started) * 1000)
            read.floor_ms = statistics.median(floor)
        print(f"  {read.name}: {read.median_ms:.0f} ms ({status}, {read.size:,} bytes)", flush=True)


_client = None


def _verified_client(user):
    """A test client logged in as ``user`` with a verified second factor, as an operator
    is after the TOTP step (production requires one, SVC_REQUIRE_2FA)."""
    from django.test import Client
    from django_otp.plugins.otp_totp.models import TOTPDevice

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    device = TOTPDevice.objects.filter(user=user, confirmed=True).first()
    if device is None:
        device = TOTPDevice.objects.create(user=user, name="bench", confirmed=True)
    session = client.session
    session["otp_device_id"] = device.persistent_id
    session.save()
    return client


def _queries_of(path: str, capture, connection) -> int:
    """The queries the page runs, counted in this process (same code, same database)."""
    global _client
    from django.contrib.auth import get_user_model

    if _client is None:
        _client = _verified_client(get_user_model().objects.get(username="bench"))
    with capture(connection) as queries:
        _client.get(path)
    return len(queries)


def fleet_pages(port: int, headers: dict[str, str]) -> list[Read]:
    """Fleet API pages of 1000 at the start, the middle and the end of the whole fleet."""
    found = []
    for label, fraction in (("10 %", 0.1), ("50 %", 0.5), ("99.9 %", 0.999)):
        cursor = urllib.parse.quote(_cursor_at(port, headers, fraction))
        found.append(
            Read(f"fleet API, page at {label} of the fleet", f"/v1/admin/fleet?cursor={cursor}",
                 "api", FLEET_TARGET_MS)
        )  # fmt: skip
    return found


@dataclass
class Export:
    label: str
    rows: int
    seconds: float
    size: int
    peak_rss_mb: float


def _worker_peak_rss(master: int) -> float:
    """The peak RSS (VmHWM) of the master's one worker, in MB."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    peaks = []
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) / 1024)
    return max(peaks)


def exports(env: dict[str, str], tmp: Path, api: dict[str, str], batches: list[tuple]) -> list:
    """Each fleet streamed as CSV by a fresh one-worker gunicorn: time, size and the
    worker's peak RSS (its high-water mark, start-up included)."""
    found = []
    for label, query, rows in batches:
        port = _support.free_port()
        server = _support.start_gunicorn(
            env, port, tmp / f"export-{port}.log", workers=1, threads=1, timeout=3600
        )
        try:
            baseline = _worker_peak_rss(server.pid)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
            started = time.perf_counter()
            conn.request("GET", f"/v1/admin/fleet.csv?{query}", headers=api)
            response = conn.getresponse()
            size = 0
            while chunk := response.read(1 << 16):
                size += len(chunk)
            seconds = time.perf_counter() - started
            peak = _worker_peak_rss(server.pid)
            if response.status != 200:
                print(f"  export {label}: {response.status}", flush=True)
                continue
            found.append(Export(label, rows, seconds, size, peak))
            print(
                f"  export {label}: {rows:,} rows in {seconds:.1f} s, peak RSS {peak:.0f} MB "
                f"(idle {baseline:.0f} MB)",
                flush=True,
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
    return found


def table(found: list[Read]) -> list[str]:
    width = max(len(read.name) for read in found)
    lines = [
        f"{'read':<{width}} | {'median ms':>9} | {'max ms':>7} | {'target':>6} | "
        f"{'floor ms':>8} | {'queries':>7} | {'bytes':>10} | status",
        "-" * (width + 72),
    ]
    for read in found:
        target = f"{read.target_ms:.0f}" if read.target_ms else "-"
        verdict = ""
        if read.status != 200:
            verdict = f"HTTP {read.status}"
        elif read.target_ms:
            verdict = "OK" if read.median_ms < read.target_ms else "OVER"
        floor = f"{read.floor_ms:.1f}" if read.floor_ms is not None else "-"
        queries = str(read.queries) if read.queries is not None else "-"
        lines.append(
            f"{read.name:<{width}} | {read.median_ms:>9.1f} | {read.max_ms:>7.1f} | "
            f"{target:>6} | {floor:>8} | {queries:>7} | {read.size:>10,} | {verdict}"
        )
    return lines


def _exists() -> bool:
    import psycopg

    with psycopg.connect(f"{PG}/postgres") as conn:
        return bool(
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--licences", dest="licenses", type=int, default=10_000_000)
    parser.add_argument("--keep", action="store_true", help="leave the database")
    parser.add_argument("--reuse", action="store_true", help="measure a kept database")
    parser.add_argument(
        "--only",
        action="append",
        metavar="TEXT",
        help="time only the reads whose name holds TEXT (repeatable), no CSV exports",
    )
    args = parser.parse_args()
    plan = Plan(args.licenses)
    reuse = args.reuse and _exists()
    print(f"disk: {shutil.disk_usage('/').free / 1e9:.0f} GB free", flush=True)
    if not reuse:
        _support.recreate_database(PG, DB_NAME)
    redis, cache_url = _support.start_redis()
    server = None
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            started = time.monotonic()
            _support.configure_django(tmp, PG, DB_NAME)
            print(f"migrations: {time.monotonic() - started:.0f} s", flush=True)
            print(f"machine: {machine()}", flush=True)
            seconds = 0.0 if reuse else load(plan)
            if not reuse:
                print(f"loaded in {seconds / 60:.1f} min", flush=True)
            from django.conf import settings
            from django.contrib.auth import get_user_model

            from licensing.models import Activation

            user_model = get_user_model()
            user = user_model.objects.filter(username="bench").first()
            if user is None:
                user = user_model.objects.create_superuser("bench", "bench@example.com", None)
            client = _verified_client(user)
            cookie = f"sessionid={client.cookies['sessionid'].value}"
            env = dict(os.environ, CACHE_URL=cache_url)
            port = _support.free_port()
            server = _support.start_gunicorn(
                env, port, tmp / "gunicorn.log", workers=2, threads=4, timeout=600
            )
            api = {"X-Admin-Key": settings.SVC_ADMIN_KEY}
            headers = {"page": {"Cookie": cookie, "Host": "127.0.0.1"}, "api": api, "device": {}}
            found = reads(plan) + fleet_pages(port, api)
            if args.only:
                found = [read for read in found if any(text in read.name for text in args.only)]
            ledger_seconds = reconcile_once()
            print(f"timing {len(found)} reads, {RUNS} runs each after a warm-up", flush=True)
            time_reads(port, found, headers)
            small_batch = Activation.objects.filter(batch__customer_id=SMALL).first().batch_id
            big_batch = Activation.objects.filter(batch__customer_id="CUST-C02").first().batch_id
            done = [] if args.only else exports(
                env,
                tmp,
                api,
                [
                    ("small fleet", f"batch_id={small_batch}",
                     Activation.objects.filter(batch_id=small_batch).count()),
                    ("large fleet", f"batch_id={big_batch}",
                     Activation.objects.filter(batch_id=big_batch).count()),
                ],
            )  # fmt: skip
            from django.db import connection

            connection.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if redis is not None:
            redis.terminate()
        if not args.keep:
            _support.recreate_database(PG, DB_NAME, create=False)
    print(
        f"\nfleet-scale reads: {plan.licenses:,} licences and activations, {plan.revoked:,} "
        f"revoked, {plan.usage:,} usage records; gunicorn 2 workers x 4 threads; "
        f"median of {RUNS} runs (placeholder claims and tokens: a read benchmark)"
    )
    print("\n".join(table(found)))
    for export in done:
        print(
            f"fleet CSV export, {export.label}: {export.rows:,} rows in {export.seconds:.1f} s "
            f"({export.rows / export.seconds:,.0f} rows/s, {export.size / 1e6:.1f} MB); "
            f"worker peak RSS {export.peak_rss_mb:.0f} MB"
        )
    print(
        f"ledger reconciliation (manage.py reconcile, the dashboard's Reconcile now): "
        f"{ledger_seconds:.1f} s; the dashboard shows its stored result"
    )
    over = [read.name for read in found if read.target_ms and read.median_ms >= read.target_ms]
    print(f"over target: {', '.join(over) if over else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
