"""`svcctl batch --trial-days` sells a trial batch, `svcctl batch-status` shows its trial,
and `svcctl convert-trial` converts it to paid: it asks first, naming the units on
trial, the new end and the bill (POST .../convert/quote, which converts nothing), like
`svcctl renew`; --dry-run prints them; converting again prints the first conversion."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from licensing.models import TrialConversion
from licensing.services import unit_activate
from svcctl import output
from svcctl.commands import batches
from svcctl.commands.base import UsageError
from tests.operators.test_svcctl import _json, svcctl

QUOTE = {
    "batch_id": "B-2026-TRIALQ7JS944NQ6", "customer_id": "CUST-NORDLICHT",
    "customer_name": "Nordlicht Sicherheitstechnik GmbH", "sku": "VISION-PRO",
    "trial_days": 30, "term_days": 365, "previous_expires_at": 1795777899,
    "expires_at": 1827313899, "units": 12, "unit_price": "240.00", "amount": "2880.00",
    "currency": "EUR",
}  # fmt: skip


class FakeClient:
    def __init__(self):
        self.posts: list[str] = []

    def post(self, path, body):
        self.posts.append(path)
        assert path.endswith("/convert/quote"), "converted without a confirmation"
        return QUOTE


def _args(**extra):
    base = dict(batch_id=QUOTE["batch_id"], days=None, json=False)
    return SimpleNamespace(**{"dry_run": False, "yes": False, **base, **extra})


def test_convert_trial_asks_naming_the_units_the_end_and_the_bill(monkeypatch, capsys):
    client = FakeClient()
    monkeypatch.setattr(batches, "connect", lambda args: client)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    asked = []
    monkeypatch.setattr("builtins.input", lambda text: asked.append(text) or "n")
    assert batches.cmd_convert_trial(_args()) == 1
    assert client.posts == [f"batches/{QUOTE['batch_id']}/convert/quote"]
    (question,) = asked
    assert question == (
        f"convert trial batch {QUOTE['batch_id']} of Nordlicht Sicherheitstechnik GmbH "
        "(CUST-NORDLICHT) to paid, ending 27 November 2027, 11:11 UTC, billing 12 x 240.00 EUR = "
        "2,880.00 EUR? [y/N] "
    )
    assert "nothing converted" in capsys.readouterr().err


def test_convert_trial_without_a_terminal_needs_yes(monkeypatch):
    client = FakeClient()
    monkeypatch.setattr(batches, "connect", lambda args: client)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    with pytest.raises(UsageError, match=r"2,880\.00 EUR\? Pass --yes to confirm"):
        batches.cmd_convert_trial(_args())


def test_convert_trial_dry_run_prints_the_units_and_the_bill(monkeypatch, capsys):
    client = FakeClient()
    monkeypatch.setattr(batches, "connect", lambda args: client)
    assert batches.cmd_convert_trial(_args(dry_run=True, yes=True)) == 0
    out = capsys.readouterr().out
    assert re.search(r"^units\s+12 on trial \(activated, not revoked\)$", out, re.M)
    assert re.search(r"^paid term\s+365 days from conversion$", out, re.M)
    assert re.search(r"^would bill\s+12 x 240\.00 EUR = 2,880\.00 EUR$", out, re.M)
    assert "dry run: nothing converted, nothing billed" in out


@pytest.mark.live
def test_svcctl_trial_batch_dry_run_refusal_yes_and_again(live_service, transactional_db):
    online = {"SVC_URL": live_service.url, "SVC_ADMIN_KEY": live_service.admin_key}
    customer = _json(svcctl("customer", "Trialling", "--kind", "oem", "--json", env=online))
    sold = svcctl(
        "batch", customer["customer_id"], "DETECT-STD", "5", "--trial-days", "21", env=online
    )
    assert sold.returncode == 0, sold.stderr
    assert re.search(
        r"^trial\s+21 days per camera from its activation, unbilled until converted$",
        sold.stdout,
        re.M,
    )
    batch_id = re.search(r"^batch\s+(B-\S+)$", sold.stdout, re.M)[1]
    token = re.search(r"^(SVC1\.\S+)$", sold.stdout, re.M)[1]
    for n in range(2):
        unit_activate(batch_token=token, device_id=f"cam-{n}")

    dry = svcctl("convert-trial", batch_id, "--dry-run", env=online)
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"^would bill\s+2 x 90\.00 EUR = 180\.00 EUR$", dry.stdout, re.M)
    no_terminal = svcctl("convert-trial", batch_id, env=online)
    assert no_terminal.returncode == 2 and "Pass --yes to confirm" in no_terminal.stderr
    assert not TrialConversion.objects.exists()

    done = svcctl("convert-trial", batch_id, "--days", "30", "--yes", env=online)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^billed\s+2 x 90\.00 EUR = 180\.00 EUR$", done.stdout, re.M)
    assert "fetch their paid licences at their next sync" in done.stdout
    conversion = TrialConversion.objects.get()
    assert conversion.term_days == 30 and conversion.units == 2
    again = svcctl("convert-trial", batch_id, "--yes", env=online)
    assert again.returncode == 0, again.stderr
    assert "already converted" in again.stdout and TrialConversion.objects.count() == 1
    status = svcctl("batch-status", batch_id, env=online)
    when = output.when(int(conversion.converted_at.timestamp()))
    assert re.search(rf"^trial\s+converted to paid {re.escape(when)}$", status.stdout, re.M)
    paid = svcctl("convert-trial", batch_id, "--days", "60", "--yes", env=online)
    assert paid.returncode == 1 and "converts once" in paid.stderr
