"""The seller every invoice names (issue 43, config.seller): production start-up refuses
a seller that is incomplete or malformed, naming each variable; a node with no seller at
all starts (device-facing nodes, benchmarks) but issues and prints no document, and
``check --deploy`` fails; `make run` writes a demo seller nobody could take for a real
one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.seller import DEMO, REQUIRED, seller_settings
from tests.conftest import REPO


def start(*options: str, **variables: str) -> subprocess.CompletedProcess:
    """``manage.py check`` in production (no SVC_DEBUG) with only ``variables`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "DJANGO_"))}
    env.update({"SVC_ENV_FILE": "", "SVC_SECRET_KEY": "s" * 50})
    env.update({"DATABASE_URL": "sqlite:///:memory:", **variables})
    return subprocess.run(
        [sys.executable, "manage.py", "check", *options],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_production_with_part_of_a_seller_stops_naming_every_missing_variable():
    given = {name: DEMO[name] for name in ("SVC_SELLER_NAME", "SVC_SELLER_IBAN")}
    result = start(**given)
    assert result.returncode != 0
    for name in REQUIRED:
        assert (name in result.stderr) == (name not in given), name


def test_production_without_any_seller_starts_and_the_deploy_check_names_the_variables():
    assert start().returncode == 0
    result = start("--deploy")
    assert result.returncode != 0
    assert "billing.E001" in result.stderr
    for name in REQUIRED:
        assert name in result.stderr, name
    assert "billing.E001" not in start("--deploy", **DEMO).stderr


@pytest.mark.django_db
def test_a_node_without_a_seller_issues_credits_and_prints_nothing(settings, customer):
    from billing import services
    from billing.documents import document_html
    from billing.einvoice import e_document
    from billing.models import Invoice

    settings.SVC_SELLER_MISSING = REQUIRED
    for refused in (
        lambda: services.invoice_issue(customer_id=customer.id),
        lambda: services.credit_note_issue(number="INV-2026-000001", reason="wrong"),
        lambda: document_html(Invoice(number="INV-2026-000001")),
        lambda: e_document(Invoice(number="INV-2026-000001")),
    ):
        with pytest.raises(services.SellerNotSet) as refusal:
            refused()
        assert refusal.value.status_code == 409
        assert "SVC_SELLER_IBAN" in str(refusal.value.detail)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("SVC_SELLER_IBAN", "DE89370400440532013001", "not a valid IBAN"),
        ("SVC_SELLER_BIC", "NOTABIC", "not a valid BIC"),
        ("SVC_SELLER_VAT_ID", "DE123456789", "not a valid EU VAT id"),
        ("SVC_SELLER_VAT_ID", "FR40303265045", "not of SVC_SELLER_COUNTRY DE"),
        ("SVC_SELLER_COUNTRY", "Germany", "ISO 3166 alpha-2"),
        ("SVC_SELLER_EMAIL", "billing", "not an e-mail address"),
    ],
)
def test_a_malformed_seller_setting_is_named(monkeypatch, name, value, says):
    for variable, demo in DEMO.items():
        monkeypatch.setenv(variable, demo)
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=says):
        seller_settings(debug=False)
    with pytest.raises(ImproperlyConfigured, match=name):
        seller_settings(debug=True)  # malformed is refused in development too


def test_the_demo_seller_starts_production_and_says_it_is_not_real():
    assert start(**DEMO).returncode == 0
    assert "not a real company" in DEMO["SVC_SELLER_NAME"]


def test_development_starts_without_a_seller(monkeypatch):
    for variable in DEMO:
        monkeypatch.delenv(variable, raising=False)
    assert seller_settings(debug=True)["SVC_SELLER_NAME"] == ""
