"""Every parsed setting is checked at start-up (issue 24): a malformed value stops the
process with a message naming the variable and what it accepts, instead of passing
``check`` and failing at the first camera (``SVC_ACTIVATION_RATE`` was parsed per
request) or silently meaning "off" (``SVC_DEBUG=ture``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


def check(**variables: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "DJANGO_"))}
    env.update({"SVC_ENV_FILE": "", "SVC_DEBUG": "1", "DATABASE_URL": "sqlite:///:memory:"})
    env.update(variables)
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("SVC_ACTIVATION_RATE", "20per10", "is not of the form N/<seconds>s"),
        ("SVC_ACTIVATION_RATE", "0/10s", "must be at least 1"),
        ("SVC_DEBUG", "ture", "must be 1 or 0"),
        ("SVC_PUBLIC_DOCS", "enabled", "must be 1 or 0"),
        ("SVC_SSL_REDIRECT", "maybe", "must be 1 or 0"),
        ("SVC_HSTS_SECONDS", "-5", "a whole number from 0 to"),
        ("SVC_ADMIN_KEY_FAILURES", "ten", "a whole number from 1 to"),
        ("SVC_LOGIN_FAILURE_LIMIT", "0", "a whole number from 1 to"),
        ("SVC_LOGIN_COOLOFF_MINUTES", "nan", "a number from"),
        ("SVC_LOGIN_ACCOUNT_FAILURE_LIMIT", "0", "a whole number from 1 to"),
        ("SVC_LOGIN_ADDRESS_FAILURE_LIMIT", "many", "a whole number from 1 to"),
        ("SVC_LIST_HEAD_SECONDS", "61", "a number from 0 to 60"),
        ("SVC_DB_CONN_MAX_AGE", "1.5", "a whole number from 0 to"),
        ("SVC_WEBHOOK_ALLOW_HTTP", "sure", "must be 1 or 0"),
        ("SVC_WEBHOOK_TIMEOUT", "0", "a number from 0.1 to 60"),
        ("SVC_WEBHOOK_RETRY_HOURS", "1000", "a number from"),
        ("SVC_ALERT_INTERVAL_MINUTES", "0", "a whole number from 1 to"),
        ("SVC_LAST_SEEN_MINUTES", "0", "a whole number from 1 to 1440"),
        ("SVC_LAST_SEEN_MINUTES", "15m", "a whole number from 1 to 1440"),
        ("SVC_SILENT_DAYS", "3661", "a whole number from 1 to 3660"),
        ("SVC_REBIND_MAX_CHANGES", "17", "a whole number from 0 to 16"),
        ("SVC_REBIND_DAYS", "0", "a whole number from 1 to 3660"),
        ("SVC_CLONE_ADDRESS_WINDOW_SECONDS", "59", "a whole number from 60 to 86400"),
        ("SVC_ALERT_EMAILS", "ops@example.com,nobody", "'nobody', not an e-mail address"),
        ("SVC_EMAIL_URL", "smtp://user:hunter2@mail:notaport", "must be smtp://"),
        ("SVC_METRICS_ALLOWLIST", "10.0.0.0/33", "SVC_METRICS_ALLOWLIST"),
        ("SVC_REPLICA_MAX_LAG_SECONDS", "-1", "a number from 0 to 86400"),
        ("SVC_REPLICA_CHECK_SECONDS", "often", "a number from 0 to 60"),
        ("SVC_DATABASE_REPLICA_URL", "postgres://r@127.0.0.1:1/none", "DATABASE_URL is not"),
    ],
)
def test_a_malformed_setting_stops_start_up_naming_it(name, value, says):
    # SVC_DB_CONN_MAX_AGE is read for PostgreSQL only; `check` does not connect.
    database = {"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
    result = check(**{name: value}, **(database if name == "SVC_DB_CONN_MAX_AGE" else {}))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: " + name), last
    assert says in last


@pytest.mark.parametrize(
    "variables",
    [
        {"SVC_ACTIVATION_RATE": "100/1m", "SVC_PUBLIC_DOCS": "1", "SVC_DEBUG": "true"},
        {"SVC_LOGIN_COOLOFF_MINUTES": "0.5", "SVC_HSTS_SECONDS": "0", "SVC_SSL_REDIRECT": "off"},
        {"SVC_LAST_SEEN_MINUTES": "60", "SVC_SILENT_DAYS": "30"},
        {
            "SVC_EMAIL_URL": "smtp+tls://alerts:secret@mail.example.com:587",
            "SVC_ALERT_EMAILS": "ops@example.com, oncall@example.com",
            "SVC_ALERT_CUSTOMERS": "1",
        },
    ],
)
def test_well_formed_settings_start(variables):
    result = check(**variables)
    assert result.returncode == 0, result.stderr


def database_options(**variables: str) -> tuple:
    """(prepare_threshold, DISABLE_SERVER_SIDE_CURSORS) of a PostgreSQL configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "DJANGO_"))}
    env.update({"SVC_ENV_FILE": "", "SVC_DEBUG": "1", **variables})
    env["DATABASE_URL"] = "postgres://nobody@127.0.0.1:1/none"  # read, never connected
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "db = settings.DATABASES['default']; "
        "print(db['OPTIONS']['prepare_threshold'], db['DISABLE_SERVER_SIDE_CURSORS'])"
    )
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return tuple(result.stdout.split())


def test_behind_a_transaction_pooler_nothing_is_prepared_or_held_across_transactions():
    """PgBouncer in transaction mode may run each transaction on another server
    connection: a statement prepared on one is unknown on the next (tests/test_edge.py
    runs the nodes through a real PgBouncer)."""
    assert database_options() == ("5", "False")
    assert database_options(SVC_DB_TRANSACTION_POOLING="1") == ("None", "True")
    # PgBouncer 1.21+ with max_prepared_statements keeps them: an explicit threshold wins.
    pooled = {"SVC_DB_TRANSACTION_POOLING": "1", "SVC_DB_PREPARE_THRESHOLD": "5"}
    assert database_options(**pooled) == ("5", "True")
