"""No console or API address answers 500, whatever bytes a path segment or a search
holds (issue 22): NUL is refused at the door (PostgreSQL text cannot hold it), the
rest reach Django's ordinary not-found handling."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.contrib import admin

pytestmark = pytest.mark.django_db

SEGMENTS = ["\x00", "a\x00b", "\x01", "\x1f", "\x7f", "\x80", "\udcff", "%", "%00", "..", "\\"]
SEGMENTS += [" ", "é", "\uffff", "\U0001f600", "x" * 300, "LIC-0123456789", "B-2026-XYZ"]


def encoded(segment: str) -> str:
    return quote(segment.encode("utf-8", "surrogatepass"), safe="")


def test_no_byte_in_an_object_id_or_search_answers_500(admin_client):
    admin_client.raise_request_exception = False
    failures = []
    for model in admin.site._registry:
        base = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        for segment in SEGMENTS:
            for suffix in ("change/", "delete/", "history/", ""):
                url = f"{base}{encoded(segment)}/{suffix}"
                status = admin_client.get(url).status_code
                if status >= 500:
                    failures.append((url, status))
        for search in ("\x00", "a\x00", "\x01"):
            status = admin_client.get(base, {"q": search}).status_code
            if status >= 500:
                failures.append((base, repr(search), status))
    assert failures == []


def test_nul_in_a_console_address_is_a_plain_400(admin_client):
    response = admin_client.get("/admin/customers/customer/%00/change/")
    assert response.status_code == 400
    assert b"NUL" in response.content


def test_nul_on_the_api_is_left_to_its_fields(admin_api):
    """The API names the field holding it (tests/test_bad_input.py has the rest)."""
    response = admin_api.get("/v1/admin/fleet?batch_id=%00")
    assert response.status_code == 400 and response.json()["detail"].startswith("batch_id: ")


def test_disallowed_host_on_the_api_is_json(client, settings):
    settings.ALLOWED_HOSTS = ["licensing.example.com"]
    settings.DEBUG = False
    response = client.get("/v1/revocations?since=0", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/json")
    assert "Host" in response.json()["detail"]
    assert "evil" not in response.json()["detail"]
    console = client.get("/admin/", HTTP_HOST="evil.example")
    assert console.status_code == 400 and console["Content-Type"].startswith("text/plain")
