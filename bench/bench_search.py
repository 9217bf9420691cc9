"""The console's search by any part of an id at fleet scale (issue 41), on PostgreSQL:
10^6 unit licences and activations with MAC-derived device ids (``cam-`` and 12 hex
digits), and the time of the fleet's and the licence list's search pages with the
trigram indexes of licensing migration 0013 and without them.

The set (``svc_search``, its own database; dropped at the end unless ``--keep``): one
customer and one batch through the services, then the units by ``INSERT ... SELECT FROM
generate_series`` (placeholder claims and tokens: a read benchmark) with the trigram
indexes dropped, which are then built again (that build is timed: what migration 0013
costs on a database of this size), and ``VACUUM ANALYZE``.

Each search is the console page itself (Django's test client in this process, logged in
as a superuser: the page's count and rows, rendered), the median of RUNS after a
warm-up: a term inside one device id (as the issue's ``8E305A87``), a term inside a
licence id, a term no row holds, and a term most rows hold (``cam-``, read along the
device-id index and stopped at a page). Then the trigram indexes are dropped and the
same searches timed again: what a ``LIKE '%...%'`` costs without them.

Run from the repository root: ``python bench/bench_search.py`` (or ``make bench``, or
``python -m bench search``). Options: ``--units N`` (default 10^6), ``--keep``,
``--reuse`` (a kept database, not loaded again). Settings: BENCH_PG (server URL without
database), BENCH_RUNS.
"""

from __future__ import annotations

import argparse
import importlib
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
DB_NAME = "svc_search"
RUNS = int(os.environ.get("BENCH_RUNS", "7"))
CHUNK = 250_000


def _migration():
    return importlib.import_module("licensing.migrations.0013_search_by_any_part")


def load(units: int) -> None:
    import psycopg

    from customers.services import customer_create
    from licensing.services import batch_issue

    customer_create(name="Search Bench Cameras", kind="oem", id="SEARCH")
    batch = batch_issue(customer_id="CUST-SEARCH", sku="VISION-PRO", units=units, term_days=3650)
    started = time.monotonic()
    with psycopg.connect(f"{PG}/{DB_NAME}") as conn:
        conn.execute("SET session_replication_role = replica")  # no FK checks, no triggers
        for name in _migration().TRIGRAM_INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
        for low in range(1, units + 1, CHUNK):
            high = min(low + CHUNK - 1, units)
            params = {"low": low, "high": high, "batch": batch.id}
            device = "'cam-' || substr(md5(n::text), 1, 12)"
            conn.execute(
                f"""
                INSERT INTO licensing_license (id, kind, customer_id, sku, device_id,
                    activation, batch_id, issued_at, expires_at, grace_days, unit_price,
                    currency, claims, token, token_sha256, revoked_at, revoke_reason)
                SELECT 'LIC-' || upper(substr(md5('l' || n), 1, 20)), 'unit', b.customer_id,
                    b.sku, {device}, 'optional', b.id,
                    now() - interval '1 second' * n, b.expires_at, 7, b.unit_price,
                    b.currency,
                    jsonb_build_object('sku', b.sku, 'grace_days', 7, 'placeholder', true,
                        'nbf', extract(epoch FROM now())::bigint - n,
                        'exp', COALESCE(extract(epoch FROM b.expires_at)::bigint, 0)),
                    'SVC1.placeholder.' || n, md5(n::text) || md5(n::text), NULL, ''
                FROM generate_series(%(low)s::int, %(high)s::int) n
                JOIN licensing_batch b ON b.id = %(batch)s
                """,  # noqa: S608 - constant text; values are parameters
                params,
            )
            conn.execute(
                f"""
                INSERT INTO licensing_activation (id, batch_id, device_id, license_id,
                    fingerprint_source, weak_binding, sdk_version, activated_at, client_ip,
                    transfer_of_id)
                SELECT n, %(batch)s, {device}, 'LIC-' || upper(substr(md5('l' || n), 1, 20)),
                    'mac', true, '2.4.1', now() - interval '1 second' * n, NULL, NULL
                FROM generate_series(%(low)s::int, %(high)s::int) n
                """,  # noqa: S608
                params,
            )
            conn.commit()
            print(f"  units {high:,} / {units:,} ({time.monotonic() - started:.0f} s)", flush=True)
    built = build_indexes()
    print(f"loaded in {time.monotonic() - started:.0f} s; trigram indexes built in {built:.1f} s")
    vacuum()


def build_indexes() -> float:
    from django.db import connection

    started = time.monotonic()
    with connection.schema_editor() as editor:
        _migration().trigram_indexes_create(None, editor)
    return time.monotonic() - started


def drop_indexes() -> None:
    from django.db import connection

    with connection.schema_editor() as editor:
        _migration().trigram_indexes_drop(None, editor)


def vacuum() -> None:
    import psycopg

    with psycopg.connect(f"{PG}/{DB_NAME}", autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE licensing_license")
        conn.execute("VACUUM ANALYZE licensing_activation")


def terms() -> list[tuple[str, str]]:
    """(what, URL) of each search timed, from the loaded rows."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT device_id, license_id FROM licensing_activation ORDER BY id OFFSET 4321 LIMIT 1"
        )
        device, license_id = cursor.fetchone()
    inside_device = device[7:15].upper()  # 8 hex digits inside cam-xxxxxxxxxxxx, any case
    inside_license = license_id[8:16].lower()
    return [
        (f"fleet, inside a device id ?q={inside_device}",
         f"/admin/licensing/activation/?q={inside_device}"),
        (f"licences, inside a device id ?q={inside_device}",
         f"/admin/licensing/license/?q={inside_device}"),
        (f"licences, inside a licence id ?q={inside_license}",
         f"/admin/licensing/license/?q={inside_license}"),
        ("fleet, held by no row ?q=ZZ9PLURAL", "/admin/licensing/activation/?q=ZZ9PLURAL"),
        ("fleet, held by every row ?q=cam-", "/admin/licensing/activation/?q=cam-"),
    ]  # fmt: skip


def time_pages(client, searches: list[tuple[str, str]]) -> dict[str, tuple[float, float, str]]:
    """what -> (median ms, slowest ms, what the page counted)."""
    import re

    timings = {}
    for what, url in searches:
        response = client.get(url)  # warm-up
        assert response.status_code == 200, (url, response.status_code)
        counted = re.search(rb'<p class="paginator">(.*?)</p>', response.content, re.S)
        shown = " ".join(re.sub(rb"<[^>]+>", b" ", counted[1]).decode().split()) if counted else ""
        samples = []
        for _ in range(RUNS):
            started = time.perf_counter()
            assert client.get(url).status_code == 200
            samples.append((time.perf_counter() - started) * 1000)
        timings[what] = (statistics.median(samples), max(samples), shown)
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-search-"))
    if not args.reuse:
        _support.recreate_database(PG, DB_NAME)
    os.environ["SVC_REQUIRE_2FA"] = "0"  # a benchmark of the search, not of the login
    _support.configure_django(tmp, PG, DB_NAME)
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client's host, templates rendered
    try:
        if not args.reuse:
            print(f"loading {args.units:,} licences and activations into {DB_NAME}", flush=True)
            load(args.units)
        else:
            build_indexes()
        user, _ = get_user_model().objects.get_or_create(
            username="bench", defaults={"is_staff": True, "is_superuser": True}
        )
        client = Client()
        client.force_login(user)
        searches = terms()
        indexed = time_pages(client, searches)
        drop_indexes()
        vacuum()
        scanned = time_pages(client, searches)
        rebuilt = build_indexes()
        print(f"\nconsole search, {args.units:,} units, median of {RUNS} (ms); "
              f"trigram indexes rebuilt in {rebuilt:.1f} s")  # fmt: skip
        width = max(len(what) for what, _ in searches)
        print(f"{'search':<{width}}  {'with index':>10}  {'without':>10}  found")
        for what, _ in searches:
            with_ms, _, shown = indexed[what]
            without_ms = scanned[what][0]
            print(f"{what:<{width}}  {with_ms:>10.1f}  {without_ms:>10.1f}  {shown}")
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            _support.recreate_database(PG, DB_NAME, create=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
