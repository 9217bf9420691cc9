"""Production settings behind a TLS-terminating proxy: `manage.py check --deploy` passes
at WARNING level with the defaults, HTTP is redirected (health checks excepted), and the
console's login works through the proxy (X-Forwarded-Proto, trusted origins)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.test import Client

from config.seller import DEMO as DEMO_SELLER
from tests.conftest import REPO


def production_env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SVC_") and key != "DJANGO_SETTINGS_MODULE"
    }
    return env | {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "SVC_SECRET_KEY": secrets.token_urlsafe(50),
        "SVC_ALLOWED_HOSTS": "licensing.example.com",
        "SVC_ENV_FILE": "",  # never a developer's var/dev.env
        **DEMO_SELLER,  # production requires a seller (config.seller)
        **extra,
    }


def manage(*args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=production_env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.every_database  # the production check reads DATABASE_URL
def test_check_deploy_passes_at_warning_level_with_the_production_defaults():
    result = manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.every_database  # the checks of fields against the database in DATABASE_URL
def test_the_database_checks_pass_as_migrate_runs_them():
    """``migrate`` (and so ``make run``) runs the checks that need a database, which
    ``check`` alone leaves out: a column default the database cannot hold stops it."""
    result = manage("check", "--database", "default", "--fail-level", "WARNING", SVC_DEBUG="1")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.every_database  # the production check reads DATABASE_URL
def test_check_deploy_names_what_a_weakened_setting_loses():
    result = manage("check", "--deploy", "--fail-level", "WARNING", SVC_SSL_REDIRECT="0")
    assert result.returncode != 0 and "security.W008" in result.stdout + result.stderr


@pytest.mark.django_db
def test_plain_http_is_redirected_but_health_checks_are_not(settings):
    settings.SECURE_SSL_REDIRECT = True
    client = Client()
    redirected = client.get("/v1/revocations")
    assert redirected.status_code == 301
    assert redirected["Location"].startswith("https://")
    assert client.get("/healthz").status_code == 200


@pytest.mark.django_db
def test_only_a_trusted_proxy_may_say_the_client_used_https(settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.SVC_TRUSTED_PROXIES = ["10.0.0.5/32"]
    client = Client()
    forged = client.get("/v1/revocations", HTTP_X_FORWARDED_PROTO="https")
    assert forged.status_code == 301  # a client's own claim is dropped
    proxied = client.get("/v1/revocations", HTTP_X_FORWARDED_PROTO="https", REMOTE_ADDR="10.0.0.5")
    assert proxied.status_code == 200


@pytest.mark.django_db
def test_console_login_through_the_tls_proxy(settings):
    settings.SVC_TRUSTED_PROXIES = ["127.0.0.1/32"]
    settings.SECURE_SSL_REDIRECT = True
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    settings.ALLOWED_HOSTS = ["licensing.example.com"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://licensing.example.com"]
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    client = Client(enforce_csrf_checks=True, HTTP_HOST="licensing.example.com")
    proxied = {"HTTP_X_FORWARDED_PROTO": "https"}
    form = client.get("/admin/login/", **proxied)
    assert form.status_code == 200
    token = client.cookies["csrftoken"].value
    assert client.cookies["csrftoken"]["secure"]
    response = client.post(
        "/admin/login/?next=/admin/",
        {"username": "ops", "password": "correct horse battery", "csrfmiddlewaretoken": token},
        HTTP_ORIGIN="https://licensing.example.com",
        HTTP_REFERER="https://licensing.example.com/admin/login/",
        **proxied,
    )
    assert response.status_code == 302 and response["Location"] == "/admin/"
    assert client.get("/admin/", **proxied).status_code == 200
