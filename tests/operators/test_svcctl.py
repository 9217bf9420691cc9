"""svcctl end to end: the installed console script against a live server (online
subcommands), and with no server and no database at all (mint, inspect, keygen)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

import facturx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import CommandError, call_command
from rest_framework.renderers import JSONRenderer

import devices
from audit.models import AuditEntry
from billing.exports import preview_csv
from billing.services import invoice_rate
from devices import token as codec
from licensing.models import Batch, License, Sku
from licensing.services import license_issue, license_revoke
from licensing.services.activation import unit_activate
from svccore import catalogue
from svcctl import output
from svcctl.output import invoice_csv

SVCCTL = Path(sys.executable).with_name("svcctl")


def svcctl(*args: str, env: dict | None = None, stdin: str | None = None, cwd=None):
    """Run the installed console script without any Django settings or database."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "DJANGO_", "DATABASE_"))
    }
    return subprocess.run(
        [str(SVCCTL), *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        cwd=cwd,
    )


def _json(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _activate(url: str, batch_token: str, device_id: str, **extra) -> dict:
    body = json.dumps({"batch_token": batch_token, "device_id": device_id, **extra}).encode()
    request = urllib.request.Request(
        f"{url}/v1/activate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def online(live_service):
    return {"SVC_URL": live_service.url, "SVC_ADMIN_KEY": live_service.admin_key}


@pytest.fixture
def public_key_file(tmp_path, signing_key) -> Path:
    path = tmp_path / "authority.pub"
    path.write_text(codec.public_key_pem(signing_key.public_key()))
    return path


# --- online: the operator's day ------------------------------------------------------------


@pytest.mark.live
def test_operator_day_from_svcctl_alone(
    live_service, online, transactional_db, tmp_path, public_key_file, signing_key_file
):
    customer = _json(
        svcctl(
            "customer", "Acme Cameras", "--kind", "oem", "--contact", "ops@acme", "--json",
            env=online,
        )
    )["customer_id"]  # fmt: skip
    assert customer.startswith("CUST-")

    batch = _json(
        svcctl(
            "batch", customer, "VISION-PRO", "3", "--token-out", str(tmp_path / "acme.key"),
            "--json", env=online,
        )
    )  # fmt: skip
    assert (batch["units"], batch["unit_price"], batch["order_value"]) == (3, 240, 720)
    assert (tmp_path / "acme.key").read_text().strip() == batch["batch_token"]
    taken = svcctl(
        "batch", customer, "VISION-PRO", "3", "--token-out", str(tmp_path / "acme.key"),
        env=online,
    )  # fmt: skip
    assert taken.returncode == 1 and "already exists" in taken.stderr  # refused before selling

    unit = _activate(live_service.url, batch["batch_token"], "cam-0001")
    _activate(
        live_service.url, batch["batch_token"], "02:42:ac:11:00:02",
        fingerprint_source="mac", weak_binding=True,
    )  # fmt: skip

    fleet = _json(svcctl("fleet", "--customer", customer, "--json", env=online))
    assert fleet["count"] == 2
    weak = _json(svcctl("--json", "fleet", "--customer", customer, "--weak", env=online))
    assert [u["device_id"] for u in weak["units"]] == ["02:42:ac:11:00:02"]
    table = svcctl("fleet", "--batch", batch["batch_id"], env=online)
    assert table.returncode == 0
    assert "cam-0001" in table.stdout and "WEAK" in table.stdout and "2 unit(s)" in table.stdout

    status = _json(svcctl("batch-status", batch["batch_id"], "--json", env=online))
    assert (status["units_activated"], status["units_remaining"]) == (2, 1)

    # The camera's hour sent twice with other counts: the second is a conflict to review.
    start = int(time.time()) - 600  # ten minutes of the camera's life, just ended
    for inferences in (500, 0):
        body = {"device_id": "cam-0001", "records": [
            {"period_start": start, "period_end": start + 600, "inferences": inferences,
             "frames": 0, "stream_seconds": 0, "events": 0}]}  # fmt: skip
        request = urllib.request.Request(
            f"{live_service.url}/v1/usage", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {unit['unit_token']}"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    conflicts = _json(svcctl("usage-conflicts", "--customer", customer, "--json", env=online))
    (conflict,) = conflicts["conflicts"]
    assert (conflict["device_id"], conflict["held"]["inferences"]) == ("cam-0001", 500)
    listed = svcctl("usage-conflicts", "--license", unit["license_id"], env=online)
    assert listed.returncode == 0 and "cam-0001" in listed.stdout and "500" in listed.stdout
    assert "1 conflict" in listed.stderr

    direct = _json(
        svcctl(
            "license", customer, "DETECT-STD", "cam-direct", "--days", "30", "--streams", "2",
            "--json", env=online,
        )
    )  # fmt: skip
    assert direct["device_id"] == "cam-direct"

    revoked = svcctl("revoke", unit["license_id"], "--reason", "camera stolen", env=online)
    assert revoked.returncode == 0, revoked.stderr
    assert "camera stolen" in revoked.stdout
    # Another worker may hold the list's head it read up to SVC_LIST_HEAD_SECONDS (1 s)
    # ago; a licence's status reads it fresh.
    status_url = (f"{live_service.url}/v1/revocations/status?license_id={unit['license_id']}"
                  "&device_id=cam-0001")  # fmt: skip
    with urllib.request.urlopen(status_url) as response:
        assert json.loads(response.read())["revoked"] is True
    time.sleep(1.1)  # past every worker's head cache (the production default, 1 s)
    with urllib.request.urlopen(f"{live_service.url}/v1/revocations") as response:
        assert unit["license_id"] in json.loads(response.read())["revoked"]
    fleet = _json(svcctl("fleet", "--customer", customer, "--json", env=online))
    assert {u["device_id"]: u["revoked"] for u in fleet["units"]}["cam-0001"] == 1

    preview = svcctl("invoice", customer, "--days", "30", env=online)
    assert preview.returncode == 0, preview.stderr
    assert "total" in preview.stdout
    export = tmp_path / "acme.csv"
    assert svcctl("invoice", customer, "--csv", str(export), env=online).returncode == 0
    rows = list(csv.DictReader(io.StringIO(export.read_text(encoding="utf-8-sig"))))
    assert all(row["customer_id"] == customer for row in rows)

    # The live catalogue as a file, then an air-gapped licence with no service at all.
    cat_file = tmp_path / "catalogue.json"
    cat_file.write_text(svcctl("catalogue", "--json", env=online).stdout)
    assert {e["sku"] for e in catalogue.load_entries(cat_file)} >= {"VISION-PRO", "DETECT-STD"}
    minted = svcctl(
        "mint", "--sku", "DETECT-STD", "--customer", customer, "--device", "cam-airgap",
        "--days", "365", "--key", str(signing_key_file),
        "--out", str(tmp_path / "airgap.lic"), "--catalogue", str(cat_file),
        env={"SVC_ISSUER": "svc-test"},
    )  # fmt: skip
    assert minted.returncode == 0, minted.stderr
    inspected = svcctl("inspect", str(tmp_path / "airgap.lic"), "--pubkey", str(public_key_file))
    assert inspected.returncode == 0, inspected.stderr
    assert "state            active" in inspected.stdout

    # Every action is in the audit log: who, from where, what, the result.
    entries = {e.action: e for e in AuditEntry.objects.all()}
    assert set(entries) == {"customer.create", "batch.issue", "license.issue", "license.revoke",
                            "usage.conflict"}  # fmt: skip
    del entries["usage.conflict"]  # the device's upload, not an operator's action
    for entry in entries.values():
        assert (entry.actor, entry.actor_kind, entry.ip, entry.result) == (
            "bootstrap",
            "api_key",
            "127.0.0.1",
            "ok",
        )
    assert entries["license.revoke"].target == unit["license_id"]


@pytest.mark.live
def test_server_errors_print_the_servers_detail_and_exit_1(online, transactional_db):
    result = svcctl("batch", "CUST-NOBODY", "VISION-PRO", "5", env=online)
    assert result.returncode == 1
    assert "customer CUST-NOBODY does not exist (HTTP 404)" in result.stderr
    unknown_sku = svcctl("license", "CUST-NOBODY", "NOPE", "cam", env=online)
    assert unknown_sku.returncode == 1 and "HTTP 404" in unknown_sku.stderr
    failed = AuditEntry.objects.get(action="batch.issue")
    assert (failed.result, failed.target) == ("failed", "CUST-NOBODY")


@pytest.mark.live
def test_wrong_or_missing_admin_key(online, live_service):
    wrong = svcctl("fleet", env={**online, "SVC_ADMIN_KEY": "not-the-key"})
    assert wrong.returncode == 1
    assert "X-Admin-Key is not valid (HTTP 403)" in wrong.stderr
    missing = svcctl("fleet", env={"SVC_URL": live_service.url})
    assert missing.returncode == 2
    assert "no admin key" in missing.stderr
    flag = svcctl("--admin-key", live_service.admin_key, "--url", live_service.url, "fleet")
    assert flag.returncode == 0, flag.stderr


@pytest.mark.live
def test_named_operator_key_is_recorded_as_its_name(online, transactional_db):
    out = io.StringIO()
    call_command(
        "create_admin_key", "alice", "--scope", "operator", stdout=out, stderr=io.StringIO()
    )
    key = out.getvalue().strip()
    result = svcctl("customer", "Named", "--kind", "end_user", env={**online, "SVC_ADMIN_KEY": key})
    assert result.returncode == 0, result.stderr
    entry = AuditEntry.objects.get(action="customer.create")
    assert (entry.actor, entry.actor_kind, entry.ip) == ("alice", "api_key", "127.0.0.1")


def test_unreachable_service_fails_with_exit_1():
    result = svcctl("fleet", env={"SVC_URL": "http://127.0.0.1:9", "SVC_ADMIN_KEY": "k"})
    assert result.returncode == 1
    assert "cannot reach http://127.0.0.1:9" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["batch", "CUST-X", "VISION-PRO", "0"],
        ["batch", "CUST-X"],
        ["revoke", "LIC-X"],  # --reason is required
        ["license", "CUST-X", "DETECT-STD", "cam", "--activation", "sometimes"],
        ["fleet", "--weak", "--strong"],
        ["no-such-command"],
        [],
    ],
)
def test_usage_errors_exit_2(args):
    result = svcctl(*args, env={"SVC_ADMIN_KEY": "k"})
    assert result.returncode == 2
    assert "usage: svcctl" in result.stderr


def test_help_of_every_subcommand_reads_well():
    top = svcctl("--help")
    assert top.returncode == 0
    commands = [
        "customer", "batch", "license", "revoke", "fleet", "batch-status", "usage",
        "usage-conflicts", "invoice", "catalogue", "register", "mint", "inspect", "keygen",
        "root-keygen", "certify",
    ]  # fmt: skip
    for command in commands:
        assert f"\n  {command} " in top.stdout
        sub = svcctl(command, "--help")
        assert sub.returncode == 0
        assert sub.stdout.startswith(f"usage: svcctl {command}")
        assert "--json" in sub.stdout and "==SUPPRESS==" not in sub.stdout


# --- offline: no server, no database -------------------------------------------------------


def test_svcctl_never_imports_django():
    code = (
        "import sys, svcctl.cli, svcctl.offline, svcctl.certs, svcctl.client, "
        "svccore.claims, svccore.licensefile; "
        "sys.exit(any(m == 'django' or m.startswith('django.') for m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "SVC_"))}
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=30).returncode == 0


def test_keygen_writes_mode_600_and_refuses_to_overwrite(tmp_path):
    key, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    created = svcctl("keygen", "--out", str(key), "--public-out", str(pub), "--json")
    info = _json(created)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert codec.key_fingerprint(pub.read_text()) == info["fingerprint"]
    assert codec.key_fingerprint(info["public_key"]) == info["fingerprint"]
    assert info["kid"] == codec.key_id(pub.read_text()) == info["fingerprint"][:16]
    assert "PRIVATE" not in created.stdout
    before = key.read_bytes()

    again = svcctl("keygen", "--out", str(key))
    assert again.returncode == 1
    assert "already exists; pass --force" in again.stderr
    assert key.read_bytes() == before

    forced = svcctl("keygen", "--out", str(key), "--public-out", str(pub), "--force")
    assert forced.returncode == 0
    assert key.read_bytes() != before
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


@pytest.fixture
def keypair(tmp_path):
    key, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    _json(svcctl("keygen", "--out", str(key), "--public-out", str(pub), "--json"))
    return key, pub


def test_mint_signs_an_air_gapped_device_bound_license_from_the_seeded_catalogue(tmp_path, keypair):
    key, pub = keypair
    out = tmp_path / "cam.lic"
    result = svcctl(
        "mint", "--sku", "VISION-PRO", "--customer", "acme", "--device", "cam-42",
        "--days", "10", "--key", str(key), "--out", str(out), "--streams", "2", "--json",
    )  # fmt: skip
    minted = _json(result)
    token = out.read_text().strip()
    claims = codec.verify_token(token, pub.read_text())
    assert claims == minted["claims"]
    assert claims["kid"] == minted["kid"] == codec.key_id(pub.read_text())
    assert minted["certificate"] is None and "KEY_UNKNOWN" in result.stderr  # uncertified key
    seeded = {e["sku"]: e for e in catalogue.load_entries()}["VISION-PRO"]
    assert claims["sub"] == "CUST-ACME"
    assert (claims["dev"], claims["act"], claims["iss"]) == ("cam-42", "optional", "svc-licensing")
    assert claims["ent"] == {"anpr": False, "defect": True, "detect": True, "ppe": True}
    assert claims["lim"] == {"max_streams": 2, "max_fps": seeded["max_fps"], "api_calls": 0}
    assert claims["exp"] - claims["iat"] == 10 * 86400
    assert claims["grace_days"] == seeded["grace_days"]
    assert claims["lic"].startswith("LIC-") and "batch" not in claims

    # The device module accepts it with the authority's public key, offline.
    assert devices.verify_token(token, pub.read_text())["dev"] == "cam-42"

    refused = svcctl(
        "mint", "--sku", "VISION-PRO", "--customer", "acme", "--device", "cam-42",
        "--key", str(key), "--out", str(out),
    )  # fmt: skip
    assert refused.returncode == 1 and "already exists" in refused.stderr


def test_perpetual_sku_mints_exp_0(tmp_path, keypair):
    key, pub = keypair
    out = tmp_path / "anpr.lic"
    _json(
        svcctl(
            "mint", "--sku", "ANPR-PERPETUAL", "--customer", "CUST-X", "--device", "cam",
            "--key", str(key), "--out", str(out), "--json",
        )
    )  # fmt: skip
    report = _json(svcctl("inspect", str(out), "--pubkey", str(pub), "--json"))
    assert report["claims"]["exp"] == 0
    assert report["state"] == "active"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--device", "*"], "bound to one device"),
        (["--device", "cam", "--sku", "NOPE"], "unknown SKU 'NOPE'"),
        (["--device", "cam", "--catalogue", "/nonexistent.json"], "does not exist"),
    ],
)
def test_mint_refusals(tmp_path, keypair, extra, message):
    key, _ = keypair
    args = ["mint", "--sku", "DETECT-STD", "--customer", "C", "--key", str(key)]
    result = svcctl(*args, "--out", str(tmp_path / "x.lic"), *extra)
    assert result.returncode == 1
    assert message in result.stderr
    assert not (tmp_path / "x.lic").exists()


def test_mint_refuses_a_key_readable_by_others(tmp_path, keypair):
    key, _ = keypair
    key.chmod(0o644)
    result = svcctl(
        "mint", "--sku", "DETECT-STD", "--customer", "C", "--device", "cam",
        "--key", str(key), "--out", str(tmp_path / "x.lic"),
    )  # fmt: skip
    assert result.returncode == 1 and "readable by group or others" in result.stderr


def test_inspect_prints_claims_window_state_and_fingerprint(tmp_path, keypair):
    key, pub = keypair
    out = tmp_path / "cam.lic"
    minted = _json(
        svcctl(
            "mint", "--sku", "DETECT-STD", "--customer", "C", "--device", "cam-1",
            "--days", "30", "--key", str(key), "--out", str(out), "--json",
        )
    )["claims"]  # fmt: skip
    fingerprint = codec.key_fingerprint(pub.read_text())
    human = svcctl("inspect", str(out), "--pubkey", str(pub))
    assert human.returncode == 0
    for text in (
        "signature        valid",
        f"kid              {fingerprint[:16]}",
        f"key fingerprint  {fingerprint}",
        "state            active",
        f"licence          {minted['lic']}",
        "device           cam-1",
        "grace until",
        "UTC",
    ):
        assert text in human.stdout

    exp, grace = minted["exp"], minted["grace_days"] * 86400
    states = {
        at: _json(svcctl("inspect", str(out), "--pubkey", str(pub), "--at", str(at), "--json"))[
            "state"
        ]
        for at in (minted["nbf"] - 1, exp, exp + 1, exp + grace, exp + grace + 1)
    }
    assert list(states.values()) == ["not yet valid", "active", "grace", "grace", "expired"]

    # The public key may also be given as base64url, in a file or inline (contract §2).
    b64 = codec.public_key_b64url(pub.read_text())
    (tmp_path / "k.b64").write_text(b64 + "\n")
    assert svcctl("inspect", str(out), "--pubkey", str(tmp_path / "k.b64")).returncode == 0
    assert svcctl("inspect", "-", "--pubkey", b64, stdin=out.read_text()).returncode == 0


def test_inspect_with_the_wrong_key_fails_but_still_shows_the_claims(tmp_path, keypair):
    key, _ = keypair
    out = tmp_path / "cam.lic"
    svcctl(
        "mint", "--sku", "DETECT-STD", "--customer", "C", "--device", "cam-1",
        "--key", str(key), "--out", str(out),
    )  # fmt: skip
    other, other_pub = tmp_path / "o.pem", tmp_path / "o.pub"
    svcctl("keygen", "--out", str(other), "--public-out", str(other_pub))
    result = svcctl("inspect", str(out), "--pubkey", str(other_pub))
    assert result.returncode == 1
    assert "INVALID" in result.stdout and "cam-1" in result.stdout
    assert "signature does not verify" in result.stderr

    tampered = tmp_path / "tampered.lic"
    head, payload, sig = out.read_text().strip().split(".")
    claims = json.loads(codec.b64url_decode(payload))
    claims["ent"]["anpr"] = True
    forged = codec.b64url_encode(json.dumps(claims).encode())
    tampered.write_text(f"{head}.{forged}.{sig}")
    assert svcctl("inspect", str(tampered), "--pubkey", str(keypair[1])).returncode == 1

    garbage = tmp_path / "garbage.lic"
    garbage.write_text("not a token")
    bad = svcctl("inspect", str(garbage), "--pubkey", str(keypair[1]))
    assert bad.returncode == 1 and "not a licence token" in bad.stderr
    private = svcctl("inspect", str(out), "--pubkey", str(key))
    assert private.returncode == 1 and "is a private key" in private.stderr


# --- the manage.py twins -----------------------------------------------------------------


@pytest.mark.django_db
def test_export_catalogue_writes_the_live_catalogue_svcctl_mint_reads(tmp_path, keypair):
    Sku.objects.filter(pk="DETECT-STD").update(max_streams=6)
    path = tmp_path / "live.json"
    call_command("export_catalogue", "--out", str(path), stderr=io.StringIO())
    entries = {e["sku"]: e for e in catalogue.load_entries(path)}
    assert entries["DETECT-STD"]["max_streams"] == 6
    assert entries["VISION-PRO"]["unit_price_tiers"][0]["unit_price"] == Decimal("240")
    key, pub = keypair
    out = tmp_path / "cam.lic"
    _json(
        svcctl(
            "mint", "--sku", "DETECT-STD", "--customer", "C", "--device", "cam",
            "--key", str(key), "--out", str(out), "--catalogue", str(path), "--json",
        )
    )  # fmt: skip
    assert codec.verify_token(out.read_text().strip(), pub.read_text())["lim"]["max_streams"] == 6


@pytest.mark.django_db
def test_manage_py_mint_issues_a_stored_license_file_with_the_servers_key(
    tmp_path, signing_key, settings, customer
):
    """manage.py mint is the server-side twin: the licence service, the server's key and
    live catalogue, stored (so revocable); svcctl mint is the offline path."""
    Sku.objects.filter(pk="VISION-PRO").update(max_fps=12)
    out = tmp_path / "cam.lic"
    stdout = io.StringIO()
    call_command(
        "mint", "--sku", "VISION-PRO", "--customer", customer.id, "--device", "cam-9",
        "--days", "0", "--out", str(out), stdout=stdout,
    )  # fmt: skip
    token = out.read_text().splitlines()[0]
    claims = codec.verify_token(token, signing_key.public_key())
    assert (claims["iss"], claims["lim"]["max_fps"], claims["exp"]) == (settings.SVC_ISSUER, 12, 0)
    assert "written to" in stdout.getvalue()
    assert License.objects.get(pk=claims["lic"]).device_id == "cam-9"
    with pytest.raises(CommandError, match="svcctl mint"):
        call_command(
            "mint", "--sku", "VISION-PRO", "--customer", customer.id, "--device", "cam-9",
            "--out", str(tmp_path / "other.lic"), "--key", "airgap.pem",
        )  # fmt: skip


@pytest.mark.django_db
def test_svcctl_invoice_csv_is_the_servers_finance_format(customer, make_batch, server_clock):
    """svcctl rebuilds the CSV from the API's JSON; it must equal billing.exports'."""
    server_clock(-3600)  # an hour ago, inside the rated window
    batch = make_batch(units=3)
    unit_activate(batch_token=batch.license.token, device_id="=cmd|' /C calc'!A0")
    license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam")
    server_clock(0)
    rated = invoice_rate(customer_id=customer.id, period_days=30)
    assert len(rated["lines"]) == 2
    over_the_wire = json.loads(JSONRenderer().render(rated), parse_float=Decimal)
    ours = io.StringIO(newline="")
    invoice_csv(over_the_wire, ours)
    assert ours.getvalue() == preview_csv(rated)


# --- operator experience: help, output files, money, fleet and revoke answers -------------

ONLINE = ["customer", "invite", "portal-users", "withdraw-invitation", "customer-keys"]
ONLINE += ["revoke-customer-key", "batch", "license", "revoke", "suspend", "reinstate"]
ONLINE += ["release"]
ONLINE += ["renew", "addon-add", "addon-remove", "addons", "convert-trial", "expiring", "fleet"]
ONLINE += ["batch-status", "usage", "usage-conflicts", "offline-activate", "offline-usage"]
ONLINE += ["invoice", "invoices", "invoice-show", "invoice-download", "credit-note"]
ONLINE += ["payment-record", "payments", "payment-import"]
ONLINE += ["catalogue", "webhooks", "events", "demo", "register"]
OFFLINE = ["mint", "inspect", "keygen", "root-keygen", "certify"]


def _sections(text: str) -> dict[str, str]:
    """A help text's sections by the first words of their heading (``online commands``)."""
    sections, title = {}, ""
    for line in text.splitlines():
        if line and not line.startswith(" "):
            title = " ".join(line.split()[:2]).rstrip(":")
            sections[title] = ""
        elif title:
            sections[title] += line + "\n"
    return sections


def test_top_level_help_lists_every_command_once_grouped_with_a_summary():
    # The parser's own list of commands, from its refusal of an unknown one.
    refused = svcctl("no-such-command")
    every = set(re.findall(r"'([a-z-]+)'", refused.stderr.split("choose from", 1)[1]))
    assert every == set(ONLINE) | set(OFFLINE)

    top = svcctl("--help")
    assert top.returncode == 0
    sections = _sections(top.stdout)
    assert "commands" not in sections and "\n  <command>\n" not in top.stdout  # the empty one
    for title, names in (("online commands", ONLINE), ("offline commands", OFFLINE)):
        rows = dict(line.split(None, 1) for line in sections[title].strip().splitlines())
        assert list(rows) == names, title
        assert all(len(summary) > 10 for summary in rows.values())
    assert "--url" in sections["options of"] and "--url" not in sections["options"]


@pytest.mark.parametrize("command", OFFLINE)
def test_offline_commands_take_no_service_options(command):
    text = svcctl(command, "--help").stdout
    assert "--json" in text
    for option in ("--url", "--admin-key", "--timeout"):
        assert option not in text


def test_an_offline_command_refuses_a_service_option():
    refused = svcctl("inspect", "cam.lic", "--pubkey", "k.pub", "--admin-key", "k")
    assert refused.returncode == 2 and "unrecognized arguments: --admin-key" in refused.stderr


@pytest.mark.parametrize("command", ONLINE)
def test_online_commands_take_the_service_options(command):
    text = svcctl(command, "--help").stdout
    assert all(option in text for option in ("--url", "--admin-key", "--timeout"))


def _help_examples() -> list[list[str]]:
    """The svcctl lines of the top-level help's examples, as argument lists, up to the
    register example (it needs the key installed on the server first, as it says)."""
    text = svcctl("--help").stdout.split("\nexamples", 1)[1]
    text = text.split("\nthen online, once the service has the key's certificate")[0]
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "svcctl":
            commands.append(words[1:])
    return commands


@pytest.mark.live
def test_help_examples_run_as_written_on_a_fresh_install(online, transactional_db, tmp_path):
    examples = _help_examples()
    assert len(examples) == 16 and not any("CUST-..." in word for e in examples for word in e)
    filled: dict[str, str] = {}
    for args in examples:
        args = [filled.get(word, word) for word in args]
        assert not any(word.startswith("<") for word in args), args
        if args[0] == "release":  # the example's camera, booted with the batch key
            batch_key = (tmp_path / "acme.batchkey").read_text().strip()
            _activate(online["SVC_URL"], batch_key, "cam-0001")
        result = svcctl(*args, env=online, cwd=tmp_path)
        assert result.returncode == 0, (args, result.stderr)
        if args[0] == "customer":
            assert re.search(r"^customer\s+CUST-ACME$", result.stdout, re.M)
        if args[0] == "batch":
            filled["<BATCH-ID>"] = re.search(r"^batch\s+(B-\S+)$", result.stdout, re.M)[1]
        if args[0] == "license":
            filled["<LICENCE-ID>"] = re.search(r"^licence\s+(LIC-\S+)$", result.stdout, re.M)[1]
        if args[0] == "inspect":
            assert "root chain       ok" in result.stdout
        if args[0] == "release":
            assert re.search(r"^licence\s+LIC-\S+ \(revoked\)$", result.stdout, re.M)
        if args[0] == "expiring":
            assert filled["<BATCH-ID>"] in result.stdout
        if args[0] == "renew":
            assert re.search(r"^term\s+365 days \(before expiry\)$", result.stdout, re.M)
    assert set(filled) == {"<BATCH-ID>", "<LICENCE-ID>"}


def test_money_has_the_currencys_decimals_from_a_number_or_a_string():
    assert output.money(Decimal("630.0"), "EUR") == "630.00 EUR"  # the API's 630.0
    assert output.money(630, "EUR") == output.money("630", "EUR") == "630.00 EUR"
    assert output.money("0.035", "EUR") == "0.035 EUR"  # more decimals are kept, not rounded
    assert output.money(Decimal("99999999999999999.99"), "EUR") == "99,999,999,999,999,999.99 EUR"
    assert output.money(Decimal("1500.0"), "JPY") == "1,500 JPY"
    assert output.money(Decimal("20000"), "EUR", grouped=False) == "20000.00 EUR"
    assert output.money("2.5", "KWD") == "2.500 KWD"
    assert output.amount(Decimal("12.5"), "EUR") == "12.50"
    with pytest.raises(TypeError, match="float"):
        output.money(630.0, "EUR")


@pytest.mark.live
def test_money_prints_with_two_decimals_in_every_table(live_service, online, transactional_db):
    customer = _json(svcctl("customer", "Money", "--kind", "oem", "--json", env=online))
    batch = svcctl("batch", customer["customer_id"], "VISION-PRO", "3", env=online)
    assert batch.returncode == 0, batch.stderr
    assert re.search(r"^unit price\s+240\.00 EUR$", batch.stdout, re.M)
    assert re.search(r"^order value\s+720\.00 EUR$", batch.stdout, re.M)
    _activate(live_service.url, batch.stdout.split()[-1], "cam-0001")  # the batch key
    direct = svcctl("license", customer["customer_id"], "DETECT-STD", "cam-1", env=online)
    # The licence answer names no currency (yet): two decimals then.
    assert re.search(r"^unit price\s+90\.00( EUR)?$", direct.stdout, re.M), direct.stdout
    catalogue_table = svcctl("catalogue", env=online).stdout
    assert "1+:240.00 100+:210.00 1000+:180.00 EUR" in catalogue_table
    invoice = svcctl("invoice", customer["customer_id"], env=online)
    assert invoice.returncode == 0, invoice.stderr
    assert re.search(r"\s240\.00\s+240\.00$", invoice.stdout, re.M), invoice.stdout
    assert re.search(r"^total \d+\.\d\d EUR$", invoice.stdout, re.M), invoice.stdout
    assert not re.search(r"\d\.\d(\s|$)", invoice.stdout)  # no 240.0 anywhere


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.live
def test_token_out_is_mode_600_and_refused_before_selling_unless_force(
    online, transactional_db, tmp_path
):
    customer = _json(svcctl("customer", "Files", "--kind", "oem", "--json", env=online))
    key_file = tmp_path / "acme.batchkey"
    sold = _json(
        svcctl(
            "batch", customer["customer_id"], "VISION-PRO", "1", "--token-out", str(key_file),
            "--json", env=online,
        )
    )  # fmt: skip
    assert _mode(key_file) == 0o600 and key_file.read_text() == sold["batch_token"] + "\n"

    before = Batch.objects.count()
    refused = svcctl(
        "batch", customer["customer_id"], "VISION-PRO", "1", "--token-out", str(key_file),
        env=online,
    )  # fmt: skip
    assert refused.returncode == 1
    assert f"{key_file} already exists; pass --force" in refused.stderr
    assert "--token-out" in refused.stderr
    assert Batch.objects.count() == before  # nothing sold

    key_file.chmod(0o644)
    replaced = _json(
        svcctl(
            "batch", customer["customer_id"], "VISION-PRO", "1", "--token-out", str(key_file),
            "--force", "--json", env=online,
        )
    )  # fmt: skip
    assert key_file.read_text() == replaced["batch_token"] + "\n" and _mode(key_file) == 0o600

    token_file = tmp_path / "cam.token"
    direct = _json(
        svcctl(
            "license", customer["customer_id"], "DETECT-STD", "cam-1", "--token-out",
            str(token_file), "--json", env=online,
        )
    )  # fmt: skip
    assert token_file.read_text() == direct["token"] + "\n" and _mode(token_file) == 0o600
    again = svcctl(
        "license", customer["customer_id"], "DETECT-STD", "cam-2", "--token-out",
        str(token_file), env=online,
    )  # fmt: skip
    assert again.returncode == 1 and "--token-out" in again.stderr

    # Sold, but the file cannot be written: the key is printed all the same, exit 1.
    lost = svcctl(
        "batch", customer["customer_id"], "VISION-PRO", "1", "--token-out",
        str(tmp_path / "no-such-dir" / "k"), env=online,
    )  # fmt: skip
    assert lost.returncode == 1 and lost.stdout.split()[-1].startswith("SVC1.")
    assert "(--token-out)" in lost.stderr and "the token is in the output above" in lost.stderr


@pytest.mark.live
def test_invoice_csv_refuses_an_existing_file_unless_force(online, transactional_db, tmp_path):
    customer = _json(svcctl("customer", "Csv", "--kind", "oem", "--json", env=online))
    export = tmp_path / "acme.csv"
    export.write_text("keep me")
    refused = svcctl("invoice", customer["customer_id"], "--csv", str(export), env=online)
    assert refused.returncode == 1
    assert f"{export} already exists; pass --force" in refused.stderr
    assert "--csv" in refused.stderr and export.read_text() == "keep me"
    forced = svcctl("invoice", customer["customer_id"], "--csv", str(export), "--force", env=online)
    assert forced.returncode == 0, forced.stderr
    assert export.read_text(encoding="utf-8-sig").startswith("invoice_number,")


@pytest.mark.live
def test_invoice_preview_of_a_customer_buying_in_two_currencies(online, transactional_db):
    entry = Sku.objects.get(pk="DETECT-STD")
    entry.pk, entry.currency = "DETECT-USD", "USD"
    entry.unit_price_tiers = [{"from_units": 1, "unit_price": "19.995"}]
    entry.save()
    customer = _json(svcctl("customer", "Two Currencies", "--kind", "oem", "--json", env=online))
    for sku, device in (("DETECT-STD", "cam-eur"), ("DETECT-USD", "cam-usd")):
        sold = svcctl("license", customer["customer_id"], sku, device, env=online)
        assert sold.returncode == 0, sold.stderr
    asked = svcctl("invoice", customer["customer_id"], env=online)
    assert asked.returncode == 1 and "EUR" in asked.stderr and "USD" in asked.stderr
    dollars = svcctl("invoice", customer["customer_id"], "--currency", "USD", env=online)
    assert dollars.returncode == 0, dollars.stderr
    assert "(USD)" in dollars.stdout and "19.995" in dollars.stdout
    assert "total 19.995 USD" not in dollars.stdout and "total 20.00 USD" in dollars.stdout


def test_offline_output_files_name_the_option_and_licenses_are_mode_600(tmp_path, keypair):
    key, pub = keypair
    license = tmp_path / "cam.lic"
    mint = ["mint", "--sku", "DETECT-STD", "--customer", "C", "--device", "cam"]
    mint += ["--key", str(key), "--out", str(license)]
    assert svcctl(*mint).returncode == 0
    assert _mode(license) == 0o600
    refused = svcctl(*mint)
    assert refused.returncode == 1
    assert f"{license} already exists; pass --force to replace it" in refused.stderr
    assert "--out" in refused.stderr
    license.chmod(0o644)
    assert svcctl(*mint, "--force").returncode == 0 and _mode(license) == 0o600

    other = tmp_path / "other.pem"
    public = svcctl("keygen", "--out", str(other), "--public-out", str(pub))
    assert public.returncode == 1 and "--public-out" in public.stderr
    assert not other.exists()  # refused before creating anything

    root, cert = tmp_path / "root.pem", tmp_path / "k.cert"
    svcctl("root-keygen", "--out", str(root))
    cert.write_text("keep me")
    certify = svcctl("certify", "--root", str(root), "--key", str(pub), "--out", str(cert))
    assert certify.returncode == 1 and "--out" in certify.stderr
    assert cert.read_text() == "keep me"


@pytest.mark.live
def test_fleet_of_an_unknown_customer_or_batch_fails(online, transactional_db):
    unknown = svcctl("fleet", "--customer", "CUST-NOBODY", env=online)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert "customer CUST-NOBODY does not exist (HTTP 404)" in unknown.stderr
    assert svcctl("fleet", "--customer", "CUST-NOBODY", "--json", env=online).returncode == 1
    batch = svcctl("fleet", "--batch", "B-NOPE", env=online)
    assert batch.returncode == 1 and "batch B-NOPE does not exist (HTTP 404)" in batch.stderr

    empty = _json(svcctl("customer", "Empty", "--kind", "oem", "--json", env=online))
    listed = svcctl("fleet", "--customer", empty["customer_id"], env=online)
    assert listed.returncode == 0, listed.stderr
    assert "0 unit(s)" in listed.stdout
    sold = _json(svcctl("batch", empty["customer_id"], "VISION-PRO", "2", "--json", env=online))
    by_batch = svcctl("fleet", "--batch", sold["batch_id"], "--json", env=online)
    assert _json(by_batch)["count"] == 0


@pytest.mark.live
def test_suspend_and_reinstate_a_batch_and_a_lease_from_svcctl(online, transactional_db):
    customer = _json(svcctl("customer", "Held Optics", "--kind", "oem", "--json", env=online))
    sold = _json(
        svcctl(
            "batch",
            customer["customer_id"],
            "VISION-PRO",
            "4",
            "--max-offline-days",
            "7",
            "--json",
            env=online,
        )  # fmt: skip
    )
    assert sold["max_offline_days"] == 7
    held = svcctl("suspend", "--batch", sold["batch_id"], "--reason", "invoice unpaid", env=online)
    assert held.returncode == 0, held.stderr
    assert f"batch        {sold['batch_id']}" in held.stdout or sold["batch_id"] in held.stdout
    assert "invoice unpaid" in held.stdout
    again = svcctl("suspend", "--batch", sold["batch_id"], "--reason", "x", env=online)
    assert again.stdout == f"batch {sold['batch_id']} was already suspended; nothing changed\n"
    back = _json(svcctl("reinstate", "--batch", sold["batch_id"], "--json", env=online))
    assert (back["suspended"], back["changed"]) == (False, True)
    both = svcctl("suspend", "LIC-1", "--customer", "CUST-1", "--reason", "x", env=online)
    assert both.returncode != 0 and "exactly one" in both.stderr
    none = svcctl("reinstate", "--customer", "CUST-NOBODY", env=online)
    assert none.returncode == 1 and "does not exist" in none.stderr


@pytest.mark.live
def test_add_list_and_remove_an_add_on_from_svcctl(online, transactional_db):
    customer = _json(svcctl("customer", "Plate Readers", "--kind", "oem", "--json", env=online))
    sold = _json(svcctl("batch", customer["customer_id"], "VISION-PRO", "3", "--json", env=online))
    catalogue = svcctl("catalogue", env=online).stdout
    assert re.search(r"^VISION-PRO\s+anpr\s+Number-plate recognition\s+\+anpr\s+60\.00 EUR "
                     r"per unit per 365-day term$", catalogue, re.M), catalogue  # fmt: skip

    added = svcctl("addon-add", "anpr", "--batch", sold["batch_id"], env=online)

    assert added.returncode == 0, added.stderr
    assert re.search(rf"^on\s+batch {sold['batch_id']}$", added.stdout, re.M), added.stdout
    assert re.search(
        r"^price\s+60\.00 EUR per unit per 365-day term, pro rata$", added.stdout, re.M
    )
    again = svcctl("addon-add", "anpr", "--batch", sold["batch_id"], env=online)
    assert (
        again.stdout
        == f"add-on anpr of batch {sold['batch_id']} was already active; nothing changed\n"
    )
    listed = svcctl("addons", "--batch", sold["batch_id"], env=online)
    assert "1 add-on(s)" in listed.stdout and re.search(r"^anpr\s+\+anpr\s", listed.stdout, re.M)
    removed = _json(
        svcctl("addon-remove", "anpr", "--batch", sold["batch_id"], "--reason", "trial over",
               "--json", env=online)
    )  # fmt: skip
    assert (removed["active"], removed["changed"], removed["remove_reason"]) == (
        False, True, "trial over",
    )  # fmt: skip
    unknown = svcctl("addon-add", "nope", "--batch", sold["batch_id"], env=online)
    assert (
        unknown.returncode == 1 and "has no add-on 'nope'; its add-ons are anpr" in unknown.stderr
    )
    both = svcctl("addon-add", "anpr", "LIC-1", "--batch", "B-1", env=online)
    assert both.returncode != 0 and "exactly one" in both.stderr


@pytest.mark.live
def test_revoking_a_revoked_license_says_when_and_why_and_exits_0(
    online, transactional_db, server_clock
):
    customer = _json(svcctl("customer", "Revoke", "--kind", "oem", "--json", env=online))
    lic = _json(
        svcctl("license", customer["customer_id"], "DETECT-STD", "cam-1", "--json", env=online)
    )["license_id"]
    first = _json(svcctl("revoke", lic, "--reason", "camera stolen", "--json", env=online))
    assert first["already_revoked"] is False
    when = output.when(first["revoked_at"])

    again = svcctl("revoke", lic, "--reason", "duplicate request", env=online)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"{lic} already revoked at {when} (camera stolen); nothing changed\n"
    assert _json(svcctl("revoke", lic, "--reason", "x", "--json", env=online))["already_revoked"]

    # The same reason again: the time tells it apart (revoked a day before asking).
    other = _json(
        svcctl("license", customer["customer_id"], "DETECT-STD", "cam-2", "--json", env=online)
    )["license_id"]
    server_clock(-86400)
    license_revoke(license_id=other, reason="camera stolen")
    server_clock(0)
    yesterday = License.objects.get(pk=other).revoked_at
    same = svcctl("revoke", other, "--reason", "camera stolen", env=online)
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith(
        f"{other} already revoked at {output.when(int(yesterday.timestamp()))}"
    )


@pytest.mark.live
def test_release_frees_a_seat_says_so_and_is_idempotent(live_service, online, transactional_db):
    customer = _json(svcctl("customer", "Seats", "--kind", "oem", "--json", env=online))
    batch = _json(svcctl("batch", customer["customer_id"], "DETECT-STD", "1", "--json", env=online))
    dead = _activate(live_service.url, batch["batch_token"], "cam-dead")["license_id"]

    first = svcctl("release", dead, "--reason", "camera replaced", env=online)

    assert first.returncode == 0, first.stderr
    assert re.search(rf"^licence\s+{dead} \(revoked\)$", first.stdout, re.M)
    assert re.search(r"^units remaining\s+1$", first.stdout, re.M)
    assert re.search(r"^releases\s+1 of 1 allowed in 30 days$", first.stdout, re.M)
    again = svcctl(
        "release", "--batch", batch["batch_id"], "--device", "cam-dead", "--reason", "x",
        env=online,
    )  # fmt: skip
    assert again.returncode == 0 and "already released at" in again.stdout
    assert "(camera replaced); nothing changed" in again.stdout
    other = _activate(live_service.url, batch["batch_token"], "cam-other")["license_id"]
    refused = svcctl("release", other, "--reason", "dead too", env=online)
    assert refused.returncode == 1 and "next release is possible at" in refused.stderr
    usage = svcctl("release", "--batch", batch["batch_id"], "--reason", "x", env=online)
    assert usage.returncode == 2 and "--batch and --device go together" in usage.stderr


@pytest.mark.live
def test_json_output_writes_money_exactly_as_the_service_sent_it(online, transactional_db):
    customer = _json(svcctl("customer", "Exact Money", "--kind", "oem", "--json", env=online))
    batch = svcctl("batch", customer["customer_id"], "VISION-PRO", "3", "--json", env=online)
    assert batch.returncode == 0, batch.stderr
    assert '"unit_price": 240.00' in batch.stdout and '"order_value": 720.00' in batch.stdout
    catalogue = svcctl("catalogue", "--json", env=online).stdout
    assert '"price_per_1000": 0.35' in catalogue and '"unit_price": 15.00' in catalogue


@pytest.mark.live
def test_renew_prints_the_new_end_and_the_bill_and_a_retry_renews_nothing(
    live_service, online, transactional_db
):
    customer = _json(svcctl("customer", "Renewing", "--kind", "oem", "--json", env=online))
    batch = _json(svcctl("batch", customer["customer_id"], "DETECT-STD", "5", "--json", env=online))
    _activate(live_service.url, batch["batch_token"], "cam-1")

    first = svcctl("renew", "--batch", batch["batch_id"], "--days", "30", "--yes", env=online)

    assert first.returncode == 0, first.stderr
    key = re.search(r"^key\s+(svcctl-\S+)$", first.stdout, re.M)[1]
    ends = output.when(batch["expires_at"] + 30 * 86400)
    assert re.search(rf"^new end\s+{re.escape(ends)}$", first.stdout, re.M)
    assert re.search(r"^term\s+30 days \(before expiry\)$", first.stdout, re.M)
    assert re.search(r"^billed\s+1 x 90\.00 EUR = 90\.00 EUR$", first.stdout, re.M)
    retry = svcctl(
        "renew", "--batch", batch["batch_id"], "--days", "30", "--key", key, "--yes", env=online
    )
    assert retry.returncode == 0 and "nothing renewed again" in retry.stdout
    assert re.search(rf"^new end\s+{re.escape(ends)}$", retry.stdout, re.M)
    listed = svcctl("expiring", "--days", "400", env=online)
    assert listed.returncode == 0 and batch["batch_id"] in listed.stdout
    assert re.search(
        rf"{batch['batch_id']}\s+Renewing \(\S+\)\s+DETECT-STD\s+1 of 5", listed.stdout
    )
    perpetual = _json(
        svcctl("batch", customer["customer_id"], "ANPR-PERPETUAL", "1", "--json", env=online)
    )
    refused = svcctl("renew", "--batch", perpetual["batch_id"], "--yes", env=online)
    assert refused.returncode == 1 and "perpetual" in refused.stderr
    usage = svcctl("renew", env=online)
    assert usage.returncode == 2 and "name what to renew" in usage.stderr


def test_an_inline_key_that_begins_with_a_dash_is_a_value_not_an_option(tmp_path):
    # One base64url key in 64 begins with "-"; argparse read it as an unknown option.
    key = next(
        k
        for k in (Ed25519PrivateKey.generate() for _ in range(10_000))
        if codec.public_key_b64url(codec.public_key_pem(k.public_key())).startswith("-")
    )
    pem = tmp_path / "k.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pem.chmod(0o600)
    out = tmp_path / "cam.lic"
    minted = svcctl(
        "mint", "--sku", "DETECT-STD", "--customer", "C", "--device", "cam-1",
        "--key", str(pem), "--out", str(out),
    )  # fmt: skip
    assert minted.returncode == 0, minted.stderr
    inline = codec.public_key_b64url(codec.public_key_pem(key.public_key()))
    result = svcctl("inspect", str(out), "--pubkey", inline)
    assert result.returncode == 0, result.stderr
    assert "signature        valid" in result.stdout


@pytest.mark.live
def test_webhooks_and_events_from_svcctl(online, transactional_db, make_batch, settings):
    """Register (refused where the server does not allow the address, naming the
    setting), list, show, rotate, delete; the event log with a type filter."""
    from events.services import event_emit, webhook_create

    refused = svcctl("webhooks", "add", "http://127.0.0.1:9/hook", env=online)
    assert refused.returncode == 1 and "SVC_WEBHOOK_ALLOW_HTTP" in refused.stderr
    assert svcctl("webhooks", "show", env=online).returncode == 2  # no id given
    settings.SVC_WEBHOOK_ALLOW_HTTP = settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    hook = webhook_create(url="http://127.0.0.1:9/hook", events=["license.revoked"])
    listed = svcctl("webhooks", "list", env=online)
    assert listed.returncode == 0 and hook.pk in listed.stdout and "delivering" in listed.stdout
    rotated = svcctl("webhooks", "rotate", hook.pk, env=online)
    assert (
        rotated.returncode == 0
        and "whsec_" in rotated.stdout
        and "shown only now" in rotated.stdout
    )
    shown = svcctl("webhooks", "show", hook.pk, "--json", env=online)
    assert json.loads(shown.stdout)["webhook_id"] == hook.pk and "whsec_" not in shown.stdout
    assert svcctl("webhooks", "delete", hook.pk, env=online).returncode == 0
    gone = svcctl("webhooks", "delete", hook.pk, env=online)
    assert gone.returncode == 1 and f"no webhook {hook.pk}" in gone.stderr
    event_emit("license.revoked", customer_id="CUST-X", data={"license_id": "LIC-SVCCTL"})
    event_emit("signing_key.revoked", data={"kid": "k"})
    events = svcctl("events", "--type", "license.revoked", env=online)
    assert events.returncode == 0 and "LIC-SVCCTL" in events.stdout and "kid" not in events.stdout


def test_a_missing_key_file_names_the_svcctl_command_that_makes_it(tmp_path):
    mint = ["mint", "--sku", "DETECT-STD", "--customer", "C", "--device", "d", "--days", "1"]
    minted = svcctl(*mint, "--key", "missing.pem", "--out", "x.lic", cwd=tmp_path)
    assert minted.returncode == 1
    assert "no signing key at missing.pem; create one with `svcctl keygen --out missing.pem`" in (
        minted.stderr
    )
    certified = svcctl("certify", "--root", "root.pem", "--key", "k.pub", "--use", "offline",
                       "--out", "c.cert", cwd=tmp_path)  # fmt: skip
    assert certified.returncode == 1
    assert "no root key at root.pem; create one with `svcctl root-keygen --out root.pem`" in (
        certified.stderr
    )


def test_release_help_reads_its_policy_as_written():
    text = " ".join(svcctl("release", "--help").stdout.split())
    assert "5% of its units per 30 days" in text and "%%" not in text


@pytest.mark.live
def test_finance_from_the_terminal_list_show_pdf_and_credit_note(
    online, transactional_db, tmp_path, server_clock
):
    """svcctl invoices / invoice-show --pdf / credit-note against a live service."""
    from billing.services import invoice_issue
    from customers.services import customer_create
    from licensing.services import license_issue

    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    customer = customer_create(name="Nordlicht Sicherheitstechnik GmbH", kind="oem", id="NORD")
    with server_clock.at(today - dt.timedelta(days=3)):
        for n in range(3):
            license_issue(customer_id=customer.pk, sku="DETECT-STD", device_id=f"cam-{n}")
    invoice = invoice_issue(customer_id=customer.pk, period_days=30, end=today)

    listed = svcctl("invoices", "--customer", "CUST-NORD", env=online)
    assert listed.returncode == 0, listed.stderr
    assert invoice.number in listed.stdout and "Nordlicht" in listed.stdout
    assert "1 document" in listed.stderr

    pdf = tmp_path / "invoice.pdf"
    shown = svcctl("invoice-show", invoice.number, "--pdf", str(pdf), env=online)
    assert shown.returncode == 0, shown.stderr
    assert re.search(rf"^invoice\s+{invoice.number}$", shown.stdout, re.M), shown.stdout
    assert re.search(r"^due\s+\d{1,2} [A-Z][a-z]+ \d{4}$", shown.stdout, re.M), shown.stdout
    assert pdf.read_bytes().startswith(b"%PDF-")
    again = svcctl("invoice-show", invoice.number, "--pdf", str(pdf), env=online)
    assert again.returncode == 1 and "already exists" in again.stderr
    # VAT and e-invoices (issue 43): the total due, and the document as Factur-X PDF
    # (its CII XML inside) or as EN 16931 XML.
    assert re.search(r"^VAT S 19 % on ", shown.stdout, re.M), shown.stdout
    assert f"total due {invoice.gross_total:,.2f} EUR" in shown.stdout
    saved = {}
    for form in ("pdf", "cii", "ubl"):
        out = tmp_path / f"document-{form}"
        got = svcctl("invoice-download", invoice.number, "--format", form, "--out", str(out),
                     env=online)  # fmt: skip
        assert got.returncode == 0, got.stderr
        saved[form] = out.read_bytes()
    assert b"<rsm:CrossIndustryInvoice" in saved["cii"] and b"<Invoice" in saved["ubl"]
    assert facturx.get_facturx_xml_from_pdf(io.BytesIO(saved["pdf"]))[1] == saved["cii"]

    # No terminal to ask on: refused without --yes, naming the amount.
    refused = svcctl("credit-note", invoice.number, "--reason", "wrong SKU", env=online, stdin="")
    assert refused.returncode == 2, refused.stderr
    assert f"{invoice.total:,.2f} EUR" in refused.stderr and "--yes" in refused.stderr
    credited = svcctl("credit-note", invoice.number, "--reason", "wrong SKU", "--yes", env=online)
    assert credited.returncode == 0, credited.stderr
    assert f"reversing {invoice.number}" in credited.stdout
    twice = svcctl("credit-note", invoice.number, "--reason", "again", "--yes", env=online)
    assert twice.returncode == 1 and "already credited" in twice.stderr
    notes = svcctl("invoices", "--kind", "credit-note", "--json", env=online)
    assert [d["credits"] for d in _json(notes)["invoices"]] == [invoice.number]
    missing = svcctl("invoice-show", "INV-1999-000009", env=online)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_inspect_of_a_missing_file_says_so_before_asking_for_a_key(tmp_path):
    missing = tmp_path / "nonexistent.lic"
    result = svcctl("inspect", str(missing))
    assert result.returncode == 1
    assert result.stderr == f"svcctl: error: token file {missing} does not exist\n"
