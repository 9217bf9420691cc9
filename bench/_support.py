"""Set-up shared by the PostgreSQL benchmarks: a database of their own, Django configured
on it with a throwaway signing key, and a gunicorn serving it. (Named with a leading
underscore so ``make bench``, which runs ``bench_*.py``, does not take it for one.)"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


def recreate_database(pg: str, name: str, *, create: bool = True) -> None:
    """Drop database ``name`` on the server ``pg`` (a URL without database) and, unless
    ``create`` is false, create it empty."""
    import psycopg

    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if create:
            conn.execute(f"CREATE DATABASE {name}")


def configure_django(tmp: Path, pg: str, name: str) -> None:
    """Point this process's settings at database ``name`` with a new signing key in
    ``tmp``, migrate it, and set Django up."""
    from config.seller import DEMO
    from svccore.keyfile import write_private_key

    key = tmp / "signing-key.pem"
    write_private_key(key)
    os.environ.update(
        DATABASE_URL=f"{pg}/{name}",
        SVC_SECRET_KEY=secrets.token_urlsafe(32),
        SVC_ADMIN_KEY=secrets.token_urlsafe(16),
        SVC_SIGNING_KEY_FILE=str(key),
        SVC_DEBUG="0",
        SVC_SSL_REDIRECT="0",
        SVC_LOG_LEVEL="WARNING",
        SVC_ENV_FILE="",  # never the development server's var/dev.env
        DJANGO_SETTINGS_MODULE="config.settings",
    )
    for name_, value in DEMO.items():  # benchmarks issue invoices: the demo seller
        os.environ.setdefault(name_, value)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, check=True
    )
    import django

    django.setup()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis() -> tuple[subprocess.Popen | None, str]:
    """A private Redis for the shared cache (``CACHE_URL``, as in production), or
    (None, a local-memory cache URL) when ``redis-server`` is not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        return None, "locmemcache://svc"
    port = free_port()
    command = [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, f"redis://127.0.0.1:{port}/0"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                return None, "locmemcache://svc"
            time.sleep(0.05)


def start_gunicorn(
    env: dict[str, str],
    port: int,
    log: Path,
    *,
    workers: int,
    threads: int,
    timeout: int,
    worker_class: str = "gthread",
    app: str = "config.wsgi",
) -> subprocess.Popen:
    """gunicorn on 127.0.0.1:``port`` with ``env``; returns once /healthz answers 200,
    or exits with the end of its log."""
    command = [
        sys.executable, "-m", "gunicorn", app, "--bind", f"127.0.0.1:{port}",
        "--workers", str(workers), "--threads", str(threads), "--worker-class", worker_class,
        "--keep-alive", "30", "--timeout", str(timeout),
    ]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return process
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            sys.exit(f"gunicorn did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def load_hourly_usage(cursor, customer_id: str, first_hour: int, hours: int) -> None:
    """``hours`` hourly usage records for each unit licence of ``customer_id`` from
    ``first_hour`` (Unix seconds), and their daily rollups, written in SQL (the ledger
    and reconcile benches' data)."""
    cursor.execute(
        """
        INSERT INTO billing_usagerecord (license_id, customer_id, sku, device_id,
            received_at, period_start, period_end, inferences, frames,
            stream_seconds, events)
        SELECT l.id, l.customer_id, l.sku, l.device_id,
            to_timestamp(%s + (g + 1) * 3600), %s + g * 3600, %s + (g + 1) * 3600,
            300 + (g * 37 + length(l.id)) %% 100, 54000, 3600, g %% 5
        FROM generate_series(0, %s) g CROSS JOIN licensing_license l
        WHERE l.customer_id = %s AND l.kind = 'unit'
        """,
        [first_hour, first_hour, first_hour, hours - 1, customer_id],
    )
    cursor.execute(
        """
        INSERT INTO billing_usagedaily (license_id, customer_id, sku, day, records,
            inferences, frames, stream_seconds, events)
        SELECT license_id, customer_id, sku,
            DATE '1970-01-01' + (period_start / 86400)::int, count(*),
            sum(inferences), sum(frames), sum(stream_seconds), sum(events)
        FROM billing_usagerecord WHERE customer_id = %s GROUP BY 1, 2, 3, 4
        """,
        [customer_id],
    )


def nginx_conf(
    directory: Path, node_port: int, port: int, *, max_size: str = "64m", cache_log: bool = False
) -> Path:
    """A plain-HTTP server block that includes the shipped status-cache.conf, with the
    static floor (``www/static-status.json``, bench_status_cache) beside it. ``max_size``
    bounds the cache on disk; ``cache_log`` writes each status answer's cache status
    (HIT, MISS, REVALIDATED, ...) to ``cache.log``, one a line."""
    temp = directory / "temp"
    conf = directory / "nginx.conf"
    shipped = REPO / "deploy" / "nginx" / "status-cache.conf"
    # As root, nginx would run its workers as "nobody", who cannot write the cache here.
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};" if os.geteuid() == 0 else ""
    log = (
        f"log_format cache_status '$upstream_cache_status';\n"
        f"    access_log {directory}/cache.log cache_status buffer=64k flush=1s;"
        if cache_log
        else "access_log off;"
    )
    conf.write_text(
        f"""{user}
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    {log}
    proxy_cache_path {directory}/cache levels=1:2 keys_zone=licensing_status:64m
                     max_size={max_size} inactive=1d use_temp_path=off;
    upstream licensing_device {{ server 127.0.0.1:{node_port}; keepalive 32; }}
    server {{
        listen 127.0.0.1:{port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        location = /v1/revocations/status {{
            include {shipped};
            proxy_pass http://licensing_device;
        }}
        location = /static-status.json {{
            root {directory}/www;
            default_type application/json;
        }}
        location /v1/ {{
            proxy_pass http://licensing_device;
        }}
    }}
}}
"""
    )
    return conf


def start_nginx(directory: Path, node_port: int, port: int, **options) -> subprocess.Popen:
    """nginx on 127.0.0.1:``port`` in front of the node on ``node_port``
    (:func:`nginx_conf`, ``options`` passed on), its cache and temporary files in
    ``directory``; returns once it listens."""
    for sub in ("temp", "cache"):
        (directory / sub).mkdir(exist_ok=True)
    conf = nginx_conf(directory, node_port, port, **options)
    command = [NGINX, "-p", str(directory), "-c", str(conf), "-g", "daemon off;"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                sys.exit(f"nginx did not start:\n{(directory / 'error.log').read_text()[-3000:]}")
            time.sleep(0.05)
