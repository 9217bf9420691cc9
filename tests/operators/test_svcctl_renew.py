"""`svcctl renew` asks before it bills, like `svcctl credit-note`, and --dry-run shows the
new end and the bill without renewing (issue 41: it billed "48 x 90.00 EUR = 4,320.00 EUR"
at once). The quote comes from POST /v1/admin/renew/quote, which renews and bills nothing
and answers what the renewal then does."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from audit.models import AuditEntry
from billing.models import LedgerEntry
from events.models import Event
from licensing.models import Batch, Renewal
from licensing.services import unit_activate
from svcctl import output
from svcctl.commands import licenses
from svcctl.commands.base import UsageError
from tests.operators.test_svcctl import _json, svcctl


def _activated(batch, count: int) -> None:
    for n in range(count):
        unit_activate(batch_token=batch.license.token, device_id=f"cam-{n}")


@pytest.mark.django_db
def test_the_quote_is_what_the_renewal_then_does_and_changes_nothing(admin_api, make_batch):
    batch = make_batch(units=10, sku="DETECT-STD")
    _activated(batch, 4)
    before = (Renewal.objects.count(), LedgerEntry.objects.count(), Event.objects.count())
    audited = AuditEntry.objects.count()
    answer = admin_api.post(
        "/v1/admin/renew/quote", {"batch_id": batch.id, "term_days": 30}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    quote = answer.json()
    assert (Renewal.objects.count(), LedgerEntry.objects.count(), Event.objects.count()) == before
    assert AuditEntry.objects.count() == audited
    assert Batch.objects.get(pk=batch.pk).expires_at == batch.expires_at
    assert (quote["units"], quote["basis"], quote["customer_name"]) == (
        4, "before_expiry", batch.customer.name,
    )  # fmt: skip
    done = admin_api.post(
        "/v1/admin/renew",
        {"batch_id": batch.id, "term_days": 30, "idempotency_key": "k1"},
        format="json",
    ).json()
    same = ("expires_at", "previous_expires_at", "units", "unit_price", "amount", "basis")
    assert {k: quote[k] for k in same} == {k: done[k] for k in same}
    refused = admin_api.post("/v1/admin/renew/quote", {"batch_id": "B-NOPE"}, format="json")
    assert refused.status_code == 404 and "detail" in refused.json()
    unknown = admin_api.post(
        "/v1/admin/renew/quote", {"batch_id": batch.id, "idempotency_key": "x"}, format="json"
    )
    assert unknown.status_code == 400 and "idempotency_key" in unknown.json()["detail"]


QUOTE = {
    "batch_id": "B-1", "license_id": "LIC-1", "customer_id": "CUST-A",
    "customer_name": "Acme", "sku": "VISION-PRO", "term_days": 365, "basis": "before_expiry",
    "previous_expires_at": 1795777899, "expires_at": 1827313899, "units": 48,
    "unit_price": "90.00", "amount": "4320.00", "currency": "EUR",
}  # fmt: skip


class FakeClient:
    def __init__(self):
        self.posts: list[str] = []

    def post(self, path, body):
        self.posts.append(path)
        assert path == "renew/quote", "renewed without a confirmation"
        return QUOTE


def _args(**extra):
    base = dict(license_id=None, batch="B-1", days=None, key=None, json=False)
    return SimpleNamespace(**{"dry_run": False, "yes": False, **base, **extra})


def test_renew_asks_naming_the_new_end_and_the_bill_and_no_renews_nothing(monkeypatch, capsys):
    client = FakeClient()
    monkeypatch.setattr(licenses, "connect", lambda args: client)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    asked = []
    monkeypatch.setattr("builtins.input", lambda text: asked.append(text) or "n")
    assert licenses.cmd_renew(_args()) == 1
    assert client.posts == ["renew/quote"]
    (question,) = asked
    assert question == (
        "renew batch B-1 of Acme (CUST-A) to 27 November 2027, 11:11 UTC (365 days), billing "
        "48 x 90.00 EUR = 4,320.00 EUR? [y/N] "
    )
    assert "nothing renewed" in capsys.readouterr().err


def test_renew_without_a_terminal_needs_yes(monkeypatch):
    client = FakeClient()
    monkeypatch.setattr(licenses, "connect", lambda args: client)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    with pytest.raises(UsageError, match=r"4,320\.00 EUR\? Pass --yes to confirm"):
        licenses.cmd_renew(_args())
    assert client.posts == ["renew/quote"]


def test_renew_dry_run_prints_the_new_end_and_the_bill(monkeypatch, capsys):
    client = FakeClient()
    monkeypatch.setattr(licenses, "connect", lambda args: client)
    assert licenses.cmd_renew(_args(dry_run=True, yes=True)) == 0
    out = capsys.readouterr().out
    assert re.search(r"^new end\s+27 November 2027, 11:11 UTC$", out, re.M)
    assert re.search(r"^would bill\s+48 x 90\.00 EUR = 4,320\.00 EUR$", out, re.M)
    assert "dry run: nothing renewed, nothing billed" in out and client.posts == ["renew/quote"]


@pytest.mark.live
def test_svcctl_renew_on_a_server_dry_run_refusal_then_yes(live_service, transactional_db):
    online = {"SVC_URL": live_service.url, "SVC_ADMIN_KEY": live_service.admin_key}
    customer = _json(svcctl("customer", "Renewing", "--kind", "oem", "--json", env=online))
    batch = _json(svcctl("batch", customer["customer_id"], "DETECT-STD", "5", "--json", env=online))
    ends = output.when(batch["expires_at"] + 30 * 86400)

    dry = svcctl("renew", "--batch", batch["batch_id"], "--days", "30", "--dry-run", env=online)
    assert dry.returncode == 0, dry.stderr
    assert re.search(rf"^new end\s+{re.escape(ends)}$", dry.stdout, re.M)
    assert re.search(r"^would bill\s+0 x 90\.00 EUR = 0\.00 EUR$", dry.stdout, re.M)
    no_terminal = svcctl("renew", "--batch", batch["batch_id"], "--days", "30", env=online)
    assert no_terminal.returncode == 2 and "Pass --yes to confirm" in no_terminal.stderr
    assert f"to {ends} (30 days)" in no_terminal.stderr
    assert not Renewal.objects.exists()

    done = svcctl("renew", "--batch", batch["batch_id"], "--days", "30", "--yes", env=online)
    assert done.returncode == 0, done.stderr
    assert re.search(rf"^new end\s+{re.escape(ends)}$", done.stdout, re.M)
    assert Renewal.objects.count() == 1
