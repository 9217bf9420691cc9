"""``manage.py mint`` issues through the licence service (stored, audited, revocable) and
writes a licence file; ``manage.py dev_setup`` certifies the development signing key
with a development root; ``SVC_ROOT_KEYS`` is parsed at start-up."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from audit.models import AuditEntry
from config.seller import DEMO as DEMO_SELLER
from config.settings_checks import root_keys
from devices import token as codec
from devices.keys import parse_certificate
from licensing.models import License
from signing.models import SigningKey
from svccore.keyfile import read_private_key, write_private_key
from svcctl.offline import keygen
from tests.licensing.key_support import certificate, install

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]


def mint(customer_id: str, out: Path, *extra: str) -> str:
    stdout = io.StringIO()
    call_command(
        "mint", "--sku", "DETECT-STD", "--customer", customer_id, "--device", "cam-42",
        "--out", str(out), *extra, stdout=stdout,
    )  # fmt: skip
    return stdout.getvalue()


def test_mint_stores_an_audited_license_and_writes_token_then_certificate(
    customer, with_roots, signing_key, tmp_path
):
    cert = certificate(with_roots, signing_key)
    install(tmp_path, cert)
    out = tmp_path / "cam-42.lic"
    printed = mint(customer.id, out, "--days", "30", "--streams", "2")
    lines = out.read_text().splitlines()
    assert lines[1:] == [cert]
    lic = License.objects.get(token=lines[0])
    assert (lic.kind, lic.device_id, lic.activation) == ("direct", "cam-42", "optional")
    assert lic.claims["lim"]["max_streams"] == 2 and lic.customer_id == customer.id
    assert f"licence {lic.id}" in printed and "with its key certificate" in printed
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # the token is a credential
    entry = AuditEntry.objects.get(action="license.issue")
    assert (entry.target, entry.actor_kind) == (lic.id, "cli")


def test_mint_without_roots_writes_the_token_alone(customer, tmp_path, signing_key):
    out = tmp_path / "cam.lic"
    mint(customer.id.removeprefix("CUST-").lower(), out)
    (token,) = out.read_text().splitlines()
    assert codec.verify_token(token, signing_key.public_key())["sub"] == customer.id


def test_mint_refuses_an_unknown_customer_and_writes_nothing(tmp_path):
    out = tmp_path / "cam.lic"
    with pytest.raises(CommandError, match="customer CUST-NOBODY does not exist"):
        mint("CUST-NOBODY", out)
    assert not out.exists() and not License.objects.exists()


def test_mint_never_overwrites_without_force(customer, tmp_path):
    out = tmp_path / "cam.lic"
    out.write_text("keep me\n")
    with pytest.raises(CommandError, match="--force"):
        mint(customer.id, out)
    assert out.read_text() == "keep me\n" and not License.objects.exists()
    mint(customer.id, out, "--force")
    assert out.read_text().startswith("SVC1.")


def test_mint_points_other_keys_to_svcctl(customer, tmp_path):
    with pytest.raises(CommandError, match="svcctl mint"):
        mint(customer.id, tmp_path / "x.lic", "--key", str(tmp_path / "k.pem"))


def test_dev_setup_certifies_the_signing_key_with_a_development_root(settings, tmp_path):
    settings.SVC_SIGNING_KEY_FILE = tmp_path / "signing-key.pem"
    var = tmp_path / "var"
    out = io.StringIO()
    call_command("dev_setup", var=str(var), stdout=out)
    root_file, public_file = var / "root-key.pem", var / "root-key.pub"
    assert stat.S_IMODE(root_file.stat().st_mode) == 0o600
    assert "offline" in out.getvalue()
    key = read_private_key(settings.SVC_SIGNING_KEY_FILE)
    root = read_private_key(root_file)
    (root_b64,) = root_keys(str(public_file))
    assert root_b64 == codec.public_key_b64url(root.public_key())
    row = SigningKey.objects.get(pk=codec.key_id(key.public_key()))
    cert = parse_certificate(row.certificate, {codec.key_id(root.public_key()): root.public_key()})
    assert (cert.use, cert.not_before, cert.not_after) == ("online", 0, 0)
    # Run again (every `make run`): nothing new to install.
    call_command("dev_setup", var=str(var), stdout=io.StringIO())
    assert AuditEntry.objects.filter(action="signing_key.install").count() == 1
    settings.SVC_ROOT_KEYS = [root_b64]
    from signing import keyring

    assert keyring.active_key_problem() == ""


def test_dev_setup_writes_the_servers_environment_and_the_public_key(settings, tmp_path):
    """`make run` leaves what its server runs with in var/dev.env (mode 600), the signing
    key's public key as PEM beside it, and prints the fingerprint /healthz shows under
    that name, never a base64 key under the name public key."""
    settings.SVC_SIGNING_KEY_FILE = tmp_path / "signing-key.pem"
    settings.SVC_ADMIN_KEY = ""
    var = tmp_path / "var"
    out = io.StringIO()
    call_command("dev_setup", var=str(var), stdout=out)
    env_file = var / "dev.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    assert values == {
        "SVC_SECRET_KEY": (var / "secret-key").read_text().strip(),
        "SVC_ADMIN_KEY": (var / "admin-key").read_text().strip(),
        "SVC_ROOT_KEYS": str(var / "root-key.pub"),
        "SVC_SSL_REDIRECT": "0",
        "SVC_SECURE_COOKIES": "0",
        "SVC_HSTS_SECONDS": "0",
        "SVC_REQUIRE_2FA": "0",  # the guides: no second factor under make run
        **DEMO_SELLER,  # an obvious demo seller: production start-up requires one
    }
    public = read_private_key(settings.SVC_SIGNING_KEY_FILE).public_key()
    pub_file = var / "signing-key.pub"
    assert pub_file.read_text() == codec.public_key_pem(public)
    assert stat.S_IMODE(pub_file.stat().st_mode) == 0o644
    printed = out.getvalue()
    assert f"fingerprint    {codec.key_fingerprint(public)}  (/healthz public_key)" in printed
    assert codec.public_key_b64url(public) not in printed
    # Every run rewrites the same file, still mode 600.
    os.chmod(env_file, 0o644)
    call_command("dev_setup", var=str(var), stdout=io.StringIO())
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600


def _settings_of(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "DJANGO_"))}
    return subprocess.run(
        [sys.executable, "-c", f"from config import settings as s; {code}"],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_settings_read_the_env_file_and_the_environment_wins(tmp_path):
    env_file = tmp_path / "dev.env"
    env_file.write_text("# a comment\nSVC_SECRET_KEY=from-the-file\nSVC_ISSUER=file-issuer\n")
    read = _settings_of(
        "print(s.SECRET_KEY, s.SVC_ISSUER)",
        SVC_ENV_FILE=str(env_file),
        SVC_ISSUER="from-env",
        **DEMO_SELLER,
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["from-the-file", "from-env"]


def test_an_empty_svc_env_file_reads_none_and_production_still_fails_closed():
    """Empty: no file, not even a var/dev.env in the checkout; no secret, no start."""
    off = _settings_of("print(s.SECRET_KEY)", SVC_ENV_FILE="")
    assert off.returncode != 0 and "SVC_SECRET_KEY is not set" in off.stderr


def test_a_named_env_file_that_is_missing_stops_start_up(tmp_path):
    missing = _settings_of("", SVC_ENV_FILE=str(tmp_path / "absent.env"))
    assert missing.returncode != 0
    assert "SVC_ENV_FILE" in missing.stderr and "absent.env" in missing.stderr


# --- SVC_ROOT_KEYS ---------------------------------------------------------------------


def test_root_keys_are_files_or_raw_keys(tmp_path, root):
    raw = codec.public_key_b64url(root.public_key())
    pem = tmp_path / "root.pub"
    pem.write_text(codec.public_key_pem(root.public_key()))
    b64 = tmp_path / "root.b64"
    b64.write_text(raw + "\n")
    assert root_keys(f"{pem}, {b64} ,{raw},") == [raw, raw, raw]
    assert root_keys("") == []


@pytest.mark.parametrize("case", ["missing file", "private key", "garbage"])
def test_an_unusable_root_key_fails_naming_the_variable(tmp_path, case):
    private = tmp_path / "root.pem"
    write_private_key(private)
    garbage = tmp_path / "garbage"
    garbage.write_text("hello")
    value = {
        "missing file": str(tmp_path / "absent.pub"),
        "private key": str(private),
        "garbage": str(garbage),
    }[case]
    with pytest.raises(ImproperlyConfigured, match="SVC_ROOT_KEYS"):
        root_keys(value)


def test_the_service_does_not_start_with_an_unusable_root_key(tmp_path):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=REPO,
        env={
            **clean,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "SVC_ENV_FILE": "",  # never a developer's var/dev.env
            "SVC_DEBUG": "1",
            "SVC_ROOT_KEYS": str(tmp_path / "absent.pub"),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "SVC_ROOT_KEYS" in result.stderr and "absent.pub" in result.stderr


def test_files_are_written_with_their_modes_whatever_the_umask(customer, tmp_path):
    """A licence file holds the device's credential: 600. A public key is 644, never
    writable by others (it decides what a device trusts). Under umask 000 as under 022."""
    previous = os.umask(0)
    try:
        out = tmp_path / "cam.lic"
        mint(customer.id, out)
        keygen(tmp_path / "airgap.pem", public_out=tmp_path / "airgap.pub")
        (tmp_path / "old.lic").write_text("x")
        os.chmod(tmp_path / "old.lic", 0o666)  # noqa: S103 - the mode the write must fix
        mint(customer.id, tmp_path / "old.lic", "--force")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "old.lic").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "airgap.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "airgap.pub").stat().st_mode) == 0o644
