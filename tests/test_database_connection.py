"""Persistent PostgreSQL connections (config/db/postgresql): checked before each request
reuses them without a round trip while healthy, and replaced, not failed on, when the
server has closed them."""

from __future__ import annotations

import json
import select
import time
import urllib.request

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql import base as django_postgresql

from tests.conftest import start_gunicorn, stop_gunicorn

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="persistent connections: PostgreSQL"
    ),
]


def _terminate_others(dsn: str) -> int:
    """Terminate the service's connections: every client backend on the test database
    but this one's and the test's own."""
    connection.ensure_connection()
    ours = connection.connection.info.backend_pid
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s "
            "AND backend_type = 'client backend'",
            [ours],
        ).fetchall()
    return len(rows)


def _dsn() -> str:
    db = connection.settings_dict
    return f"host={db['HOST']} port={db['PORT'] or 5432} user={db['USER']} dbname={db['NAME']}"


def test_a_healthy_idle_connection_is_usable_without_a_query(monkeypatch):
    connection.ensure_connection()

    def round_trip(self):
        raise AssertionError("the health check sent a query to a healthy connection")

    monkeypatch.setattr(django_postgresql.DatabaseWrapper, "is_usable", round_trip)
    assert connection.is_usable() is True


def test_a_connection_the_server_closed_is_not_usable():
    connection.ensure_connection()
    raw = connection.connection
    with psycopg.connect(_dsn(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [raw.info.backend_pid])
    deadline = time.monotonic() + 5
    while not select.select([raw.fileno()], [], [], 0.05)[0]:
        assert time.monotonic() < deadline, "the server's goodbye never arrived"
    assert connection.is_usable() is False
    connection.close()
    connection.ensure_connection()
    assert connection.is_usable() is True


def test_requests_after_the_server_dropped_every_connection_succeed(tmp_path):
    service = start_gunicorn(tmp_path, SVC_DB_CONN_MAX_AGE="600")
    try:

        def catalogue() -> int:
            request = urllib.request.Request(
                f"{service.url}/v1/admin/catalogue", headers={"X-Admin-Key": service.admin_key}
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                assert json.load(response)["skus"]
                return response.status

        # Every worker thread opens its persistent connection.
        assert all(catalogue() == 200 for _ in range(30))
        assert _terminate_others(_dsn()) >= 1
        time.sleep(0.2)  # the server's goodbye reaches the workers' sockets
        assert all(catalogue() == 200 for _ in range(30))
    finally:
        stop_gunicorn(service)
