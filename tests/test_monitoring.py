"""Spec §4.1 monitoring endpoints, docs switch, and JSON errors for /v1 (§7)."""

from __future__ import annotations

import hashlib
import importlib
import json
import time
from urllib.parse import unquote

import pytest
from cryptography.hazmat.primitives import serialization
from django.test import Client
from django.urls import clear_url_caches

pytestmark = pytest.mark.django_db


def test_healthz_reports_signing_key_fingerprint(client, signing_key):
    body = client.get("/healthz").json()
    raw = signing_key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    assert body["ok"] is True
    assert body["public_key"] == hashlib.sha256(raw).hexdigest()
    assert body["kid"] == body["public_key"][:16]  # the key id tokens name
    assert abs(body["time"] - time.time()) < 5


def test_healthz_is_503_when_the_signing_key_is_unusable(client, settings, tmp_path):
    settings.SVC_SIGNING_KEY_FILE = tmp_path / "missing.pem"
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["ok"] is False
    assert "signing key unavailable" in response.json()["detail"]


def test_index_names_host_and_device_endpoints_only(client, settings):
    settings.ALLOWED_HOSTS = ["licensing.example"]
    response = client.get("/", HTTP_HOST="licensing.example")
    body = response.json()
    text = response.content.decode().lower()
    assert body["host"] == "licensing.example"
    assert "POST /v1/activate" in body["endpoints"].values()
    assert "/v1/admin" not in text and "admin" not in text
    assert "github" not in text and "source" not in text


@pytest.fixture
def reload_urls(settings):
    import config.urls

    def reload(docs: bool):
        settings.SVC_PUBLIC_DOCS = docs
        importlib.reload(config.urls)
        clear_url_caches()

    yield reload
    reload(False)


def test_docs_are_off_by_default_and_on_with_svc_public_docs(client, reload_urls):
    reload_urls(False)
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path).status_code == 404
    reload_urls(True)
    schema = client.get("/openapi.json")
    assert schema.status_code == 200
    assert "/v1/activate" in json.loads(schema.content)["paths"]  # JSON, as named
    for path in ("/docs", "/redoc"):
        page = client.get(path)
        assert page.status_code == 200
        assert "cdn" not in page.content.decode().lower()  # UI assets are served locally


def test_unknown_v1_route_and_wrong_method_answer_json(client, settings):
    missing = client.get("/v1/licences/whatever")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "no endpoint GET /v1/licences/whatever"}
    newline = client.get("/v1/licences/what%0Aever")  # "." of a regex stops at a newline
    assert newline.json() == {"detail": "no endpoint GET /v1/licences/what\never"}
    wrong = client.get("/v1/activate")
    assert wrong.status_code == 405
    assert wrong.json() == {"detail": 'Method "GET" not allowed.'}
    # An unsafe method too: not Django's HTML CSRF page (a path with a non-printable id
    # is no route either, see config.api.converters).
    for path in ("/v1/licences/whatever", "/v1/admin/invoices/INV%00/credit-note"):
        posted = Client(enforce_csrf_checks=True).post(
            path, HTTP_X_ADMIN_KEY=settings.SVC_ADMIN_KEY
        )
        assert posted.status_code == 404
        assert posted.json() == {"detail": f"no endpoint POST {unquote(path)}"}


def test_unexpected_error_is_json_500_without_a_stack_trace(monkeypatch):
    from licensing import revocations

    def explode():
        raise RuntimeError("secret internals at /srv/app.py line 12")

    monkeypatch.setattr(revocations, "head_get", explode)
    response = Client(raise_request_exception=False).get("/v1/revocations")
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error; the service log has the details"}
    assert "Traceback" not in response.content.decode()
