"""The Content-Security-Policy (issue 39 item 7; django-csp, config.settings): on every
console and portal page, not on the API's JSON, CSV, PDF or metrics answers. The pages
themselves hold no inline script, event handler or style attribute (the browser test,
tests/test_browser_walk.py, finds no violation on any of them); the one inline
style allowed is the invoice document's, by its hash."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.template.loader import render_to_string
from django.test import Client

from customers.services import customer_create
from tests.portal.conftest import account_for

TEMPLATES = Path(settings.BASE_DIR) / "templates"
STRICT = {
    "default-src 'self'",
    "script-src 'self'",
    "img-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
}


def _policy(response) -> dict[str, str]:
    header = response.get("Content-Security-Policy")
    assert header, f"no policy on {response.request['PATH_INFO']}"
    return {part.split()[0]: part.strip() for part in header.split(";") if part.strip()}


def _strict(response) -> None:
    policy = _policy(response)
    assert STRICT <= set(policy.values()), policy
    assert "unsafe-inline" not in response["Content-Security-Policy"]
    assert "unsafe-eval" not in response["Content-Security-Policy"]
    assert policy["style-src"] == f"style-src 'self' {settings.DOCUMENT_STYLE_HASH}"


@pytest.fixture
def operator(db, django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "x"))
    return client


@pytest.fixture
def customer_user(db):
    customer = customer_create(name="Hafen Kameras GmbH", kind="oem")
    client = Client()
    client.force_login(account_for(customer, "ops@hafen.example").user)
    return client


@pytest.mark.parametrize(
    "path", ["/admin/", "/admin/dashboard/", "/admin/licensing/batch/", "/admin/audit/auditentry/"]
)
def test_console_pages_carry_the_policy(operator, path):
    response = operator.get(path)
    assert response.status_code == 200
    _strict(response)


@pytest.mark.parametrize("path", ["/portal/", "/portal/fleet/", "/portal/invoices/"])
def test_portal_pages_carry_the_policy(customer_user, path):
    response = customer_user.get(path)
    assert response.status_code == 200
    _strict(response)


@pytest.mark.parametrize("path", ["/admin/login/", "/portal/login/"])
def test_login_pages_carry_the_policy(db, path):
    _strict(Client().get(path))


def test_a_refusal_page_carries_it_too(db, django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_user("nobody", password="x", is_staff=True))
    response = client.get("/admin/dashboard/")
    assert response.status_code == 403
    _strict(response)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/v1/admin/fleet", 200),
        ("/v1/admin/fleet.csv", 200),
        ("/v1/admin/invoices/INV-1999-000001.pdf", 404),
        ("/v1/nothing-here", 404),
        ("/metrics", 200),
    ],
)
def test_api_answers_carry_none(db, admin_api, path, status):
    response = admin_api.get(path)
    assert response.status_code == status
    assert "Content-Security-Policy" not in response


def test_healthz_and_a_device_refusal_carry_none(db, device_api):
    assert "Content-Security-Policy" not in Client().get("/healthz")
    response = device_api.post("/v1/activate", {}, format="json")
    assert response.status_code == 400
    assert "Content-Security-Policy" not in response


def test_the_document_style_hash_is_the_rendered_style():
    html = render_to_string(
        "billing/document.html", {"number": "INV-2026-000001", "heading": "Invoice"}
    )
    style = re.search(r"<style>(.*?)</style>", html, re.S)[1]
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert settings.DOCUMENT_STYLE_HASH == f"'sha256-{digest}'"
    assert len(re.findall(r"<style", html)) == 1


INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>"), "inline script"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "event handler attribute"),
    (re.compile(r"\sstyle\s*=", re.I), "style attribute"),
    (re.compile(r"javascript:", re.I), "javascript: URL"),
]


def test_no_template_holds_inline_script_or_style():
    found = []
    for path in sorted(TEMPLATES.rglob("*.html")):
        text = path.read_text(encoding="utf-8")
        for pattern, what in INLINE:
            found += [f"{path.relative_to(TEMPLATES)}: {what}" for _ in pattern.finditer(text)]
        if "<style" in text and path.name != "document_style.html":
            found.append(f"{path.relative_to(TEMPLATES)}: <style> element")
    assert not found, "\n".join(found) + (
        "\nThe policy refuses these: move styles to static/svc/*.css (a class such as "
        "svc-wide for a full-width table), scripts to static/svc/*.js"
    )


# Markup the service writes in Python (format_html in the admin columns, charts).
MARKUP_IN_CODE = re.compile(r"<[a-z][^>]*\s(style|on[a-z]+)\s*=", re.I)
PACKAGES = ("config", "customers", "licensing", "billing", "audit", "operators", "console")
PACKAGES += ("portal", "events", "signing", "ratelimits")


def test_no_code_writes_a_style_or_event_handler_attribute():
    root = Path(settings.BASE_DIR)
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MARKUP_IN_CODE.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_static_files_are_served(operator):
    from django.contrib.staticfiles import finders

    for name in ("console.css", "console-responsive.css", "portal.css", "console.js"):
        assert finders.find(f"svc/{name}"), name
