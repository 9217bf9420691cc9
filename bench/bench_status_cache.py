"""Signed licence statuses a cache can serve (issue 46), against floors in the same run.

1. Signatures and queries: 300 ``GET /v1/revocations/status`` for one unchanged licence
   in this process (Django's test client on PostgreSQL), once through the per-request
   path the view used before issue 46 (``revocations.license_status`` with the check-in,
   then last seen) and once through the view as it is (``licensing.status_store``).
   Printed as "300 GETs: X signatures, Y queries".
2. The status through nginx's cache (deploy/nginx/status-cache.conf, included as it
   ships) against nginx serving a static file of the same size from the same server
   block, loaded with wrk (BENCH_CONNECTIONS connections, BENCH_SECONDS per measurement,
   BENCH_ROUNDS interleaved rounds, median). Target: >= 0.9 of the floor. A third line
   shows the same status from the node alone (no cache), for scale.

Only the ratios carry from one machine or run to another. Needs wrk, nginx and
PostgreSQL on 127.0.0.1 (trust auth); skipped, saying why, without them.
Settings: BENCH_PG, BENCH_CONNECTIONS, BENCH_SECONDS, BENCH_ROUNDS.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = "svc_bench_status"
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
GETS = 300
TARGET = 0.9
NGINX = _support.NGINX
WRK = shutil.which("wrk")


def counted(call) -> tuple[int, int]:
    """(signatures, queries) of ``GETS`` calls of ``call``."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from licensing import revocations

    before = revocations.SIGNATURES
    with CaptureQueriesContext(connection) as queries:
        for _ in range(GETS):
            call()
    return revocations.SIGNATURES - before, len(queries)


def signatures_and_queries(license_id: str, device_id: str) -> None:
    from django.test import Client

    from licensing import revocations, services

    def per_request() -> None:  # what the view did before issue 46
        revocations.license_status(license_id=license_id, device_id=device_id, check_in=True)
        services.unit_seen(license_id=license_id, device_id=device_id)

    client = Client()
    query = {"license_id": license_id, "device_id": device_id}

    def stored() -> None:
        answer = client.get("/v1/revocations/status", query, HTTP_HOST="127.0.0.1")
        assert answer.status_code == 200, answer.content

    for label, call in (("signed per request (before)", per_request), ("stored (now)", stored)):
        signatures, queries = counted(call)
        print(f"{GETS} GETs, {label}: {signatures} signatures, {queries} queries")


def wrk(url: str) -> float:
    command = [WRK, "-t2", f"-c{CONNECTIONS}", f"-d{SECONDS:g}s", url]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"{url}: failed requests\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main() -> int:
    missing = [
        what
        for what, ok in (
            ("wrk (apt-get install wrk)", WRK),
            ("nginx (apt-get install nginx)", NGINX),
            ("psql (PostgreSQL's client)", shutil.which("psql")),
        )
        if not ok
    ]
    if missing:
        print("skipped: missing " + ", ".join(missing))
        return 0
    print(
        f"machine: {os.cpu_count()} cores (shared with whatever else runs: the ratios, not "
        "the rates, are the figures)"
    )
    from config.seller import DEMO

    for name, value in DEMO.items():  # a production start-up names its seller
        os.environ.setdefault(name, value)
    _support.recreate_database(PG, DB_NAME)
    nginx = server = None
    with tempfile.TemporaryDirectory(prefix="bench-status-") as tmp:
        directory = Path(tmp)
        try:
            _support.configure_django(directory, PG, DB_NAME)
            from customers.services import customer_create
            from licensing.services import license_issue

            customer = customer_create(name="Bench statuses", kind="oem", id="STA")
            lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-b1")
            signatures_and_queries(lic.id, "cam-b1")

            env = {**os.environ, "SVC_DB_CONN_MAX_AGE": "600", "SVC_ALLOWED_HOSTS": "*"}
            node_port, port = _support.free_port(), _support.free_port()
            server = _support.start_gunicorn(
                env, node_port, directory / "gunicorn.log", workers=2, threads=1, timeout=60,
                worker_class="sync", app="config.device_wsgi",  # the pool nginx sends it to
            )  # fmt: skip
            path = f"/v1/revocations/status?license_id={lic.id}&device_id=cam-b1"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{node_port}{path}") as answer:
                    body, headers = answer.read(), answer.headers
            except OSError:
                sys.exit((directory / "gunicorn.log").read_text()[-3000:])
            (directory / "www").mkdir()
            (directory / "www" / "static-status.json").write_bytes(body)
            nginx = _support.start_nginx(directory, node_port, port)
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 10
            while True:
                try:
                    with urllib.request.urlopen(base + path) as answer:
                        answer.read()
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            with urllib.request.urlopen(base + path) as answer:
                cached = answer.headers["X-Cache-Status"]
            print(
                f"answer: {len(body)} B body, {len(headers)} headers from the device node; "
                f"second GET through nginx: X-Cache-Status {cached}"
            )
            rates: dict[str, list[float]] = {"cache": [], "static": [], "node": []}
            for _ in range(ROUNDS):
                rates["cache"].append(wrk(base + path))
                rates["static"].append(wrk(base + "/static-status.json"))
                rates["node"].append(wrk(f"http://127.0.0.1:{node_port}{path}"))
            cache, static, node = (statistics.median(rates[k]) for k in ("cache", "static", "node"))
            ratio = cache / static
            print(f"static file of {len(body)} B from nginx (floor): {static:,.0f} req/s")
            print(
                f"status through nginx's cache: {cache:,.0f} req/s = {ratio:.2f} of the floor "
                f"(target >= {TARGET})"
            )
            print(
                f"status from the device node alone (2 sync workers, no cache): {node:,.0f} req/s"
            )
            if ratio < TARGET:
                print(f"below the target of {TARGET} in this run")
            return 0  # a figure, not a gate: the machine may be shared
        finally:
            if nginx is not None:
                nginx.terminate()
                nginx.wait(timeout=10)
            if server is not None:
                server.terminate()
                server.wait(timeout=20)
            from django.db import connections

            connections.close_all()
            _support.recreate_database(PG, DB_NAME, create=False)


if __name__ == "__main__":
    sys.exit(main())
