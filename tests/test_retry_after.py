"""Every 503 the service answers carries Retry-After (issue 39 item 7): one case per
kind of 503, each provoked as it happens (a mail server that refuses the connection, the
admin API without a key, a retired signing key, a database that fails), and the OpenAPI
schema declares the header on every operation that may answer 503. Before: an invitation
whose e-mail could not be sent and the disabled admin API answered 503 without it, and
so did /healthz."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.db import OperationalError
from django.db.backends import utils as db_utils
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from config.errors import (
    DB_RETRY_AFTER_SECONDS,
    SIGNER_RETRY_AFTER_SECONDS,
    UNAVAILABLE_RETRY_AFTER_SECONDS,
)
from licensing import health
from signing import keyring
from signing.models import SigningKey
from tests.conftest import _free_port

pytestmark = pytest.mark.django_db


def _admin() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=settings.SVC_ADMIN_KEY)
    return client


def _mail_refused(settings, customer):
    """The invitation's e-mail goes to a mail server that refuses the connection."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", _free_port()
    settings.EMAIL_TIMEOUT = 2
    response = _admin().post(
        f"/v1/admin/customers/{customer.pk}/users",
        {"email": "ana@hafen.example", "name": "Ana"},
        format="json",
    )
    return response, "post", "/v1/admin/customers/{customer_id}/users"


def _admin_api_disabled(settings, customer):
    """No SVC_ADMIN_KEY and no named key: the admin API is off."""
    key = settings.SVC_ADMIN_KEY
    settings.SVC_ADMIN_KEY = ""
    response = APIClient().get("/v1/admin/fleet", HTTP_X_ADMIN_KEY=key)
    return response, "get", "/v1/admin/fleet"


def _signing_key_retired(settings, customer, monkeypatch):
    """The active signing key was retired by another process: nothing can be signed."""
    # The registry this process reads during the test is the test's own: the retired key
    # it caches must not outlive the test's rolled-back transaction in this worker.
    monkeypatch.setattr(keyring, "_registry", [])
    monkeypatch.setattr(keyring, "REFRESH_SECONDS", 0)
    keyring.registry()  # the key in use, registered
    assert SigningKey.objects.update(retired_at="2026-01-01T00:00Z") >= 1
    response = _admin().post(
        "/v1/admin/licenses",
        {"customer_id": customer.pk, "sku": "DETECT-STD", "device_id": "cam-lobby"},
        format="json",
    )
    return response, "post", "/v1/admin/licenses"


def _database_fails(monkeypatch):
    def fail(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(db_utils.CursorWrapper, "execute", fail)
    monkeypatch.setattr(db_utils.CursorWrapper, "executemany", fail)


def _database_down(settings, customer, monkeypatch):
    _database_fails(monkeypatch)
    return _admin().get("/v1/admin/fleet"), "get", "/v1/admin/fleet"


CASES = {
    "mail-unavailable": (_mail_refused, UNAVAILABLE_RETRY_AFTER_SECONDS),
    "admin-api-disabled": (_admin_api_disabled, UNAVAILABLE_RETRY_AFTER_SECONDS),
    "signing-key-unusable": (_signing_key_retired, SIGNER_RETRY_AFTER_SECONDS),
    "database-unavailable": (_database_down, DB_RETRY_AFTER_SECONDS),
}


@pytest.fixture(scope="module")
def openapi(django_db_blocker):
    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_503_of_the_api_carries_retry_after_as_its_schema_declares(
    case, settings, customer, monkeypatch, openapi
):
    provoke, seconds = CASES[case]
    args = (settings, customer, monkeypatch)[: provoke.__code__.co_argcount]
    response, method, route = provoke(*args)
    assert response.status_code == 503, (response.status_code, response.content[:300])
    assert response["Retry-After"] == str(seconds)
    assert set(json.loads(response.content)) == {"detail"}
    declared = openapi["paths"][route][method]["responses"]["503"]
    assert "Retry-After" in declared.get("headers", {}), (method, route)


def test_the_schema_declares_retry_after_on_every_503(openapi):
    operations = [
        (method, path, op)
        for path, ops in openapi["paths"].items()
        for method, op in ops.items()
        if isinstance(op, dict) and "responses" in op
    ]
    with_503 = [(m, p) for m, p, op in operations if "503" in op["responses"]]
    assert len(with_503) >= 40
    missing = [
        (m, p)
        for m, p, op in operations
        if "503" in op["responses"]
        and "Retry-After" not in op["responses"]["503"].get("headers", {})
    ]
    assert not missing


def test_healthz_failing_carries_retry_after(monkeypatch):
    monkeypatch.setattr(health, "_db_passed_at", [float("-inf")])  # no earlier check stands
    _database_fails(monkeypatch)
    response = Client(raise_request_exception=False).get("/healthz")
    assert response.status_code == 503
    assert int(response["Retry-After"]) in (DB_RETRY_AFTER_SECONDS, UNAVAILABLE_RETRY_AFTER_SECONDS)


def test_a_console_page_without_its_database_carries_retry_after(admin_user, monkeypatch):
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    _database_fails(monkeypatch)
    response = client.get("/admin/")
    assert response.status_code == 503
    assert response["Retry-After"] == str(DB_RETRY_AFTER_SECONDS)


def test_no_other_answer_gets_retry_after():
    assert _admin().get("/v1/admin/fleet").status_code == 200
    assert not _admin().get("/v1/admin/fleet").has_header("Retry-After")
    assert not Client().get("/admin/login/").has_header("Retry-After")
