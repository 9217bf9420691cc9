"""Contract §1-2: signing keys (mode 600, no overwrite, refused when world-readable),
fail-closed settings, and no secret in output."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from devices.token import key_fingerprint
from signing import keyring
from svccore.keyfile import read_private_key

REPO = Path(__file__).resolve().parents[2]


def test_keygen_writes_mode_600_and_prints_fingerprint(tmp_path, capsys):
    path = tmp_path / "k" / "signing.pem"
    call_command("keygen", out=str(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    out = capsys.readouterr().out
    assert f"fingerprint (sha256): {key_fingerprint(read_private_key(path).public_key())}" in out
    assert "PRIVATE" not in out


def test_keygen_refuses_to_overwrite_without_force(tmp_path):
    path = tmp_path / "signing.pem"
    call_command("keygen", out=str(path))
    before = path.read_bytes()
    with pytest.raises(CommandError, match="--force"):
        call_command("keygen", out=str(path))
    assert path.read_bytes() == before
    call_command("keygen", out=str(path), force=True)
    assert path.read_bytes() != before
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_server_refuses_a_key_readable_by_others(tmp_path, settings):
    path = tmp_path / "signing.pem"
    call_command("keygen", out=str(path))
    os.chmod(path, 0o644)
    settings.SVC_SIGNING_KEY_FILE = path
    with pytest.raises(ImproperlyConfigured, match="chmod 600"):
        keyring.signing_key()


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    # The test run's seller stays: production start-up requires one (config.seller).
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SVC_") or k.startswith("SVC_SELLER_")
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**clean, "SVC_ENV_FILE": "", **env},  # never a developer's var/dev.env
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_wsgi_start_fails_without_a_key_file(tmp_path):
    result = _python(
        "import config.wsgi",
        SVC_SECRET_KEY="s" * 40,
        SVC_SIGNING_KEY_FILE=str(tmp_path / "absent.pem"),
    )
    assert result.returncode != 0
    assert "manage.py keygen" in result.stderr


def test_production_settings_refuse_to_start_without_a_secret():
    result = _python("import django; from django.conf import settings; settings.DEBUG")
    assert result.returncode != 0
    assert "SVC_SECRET_KEY is not set" in result.stderr


def test_key_material_is_never_in_healthz_or_errors(client, db, signing_key_file):
    pem = signing_key_file.read_text()
    body = client.get("/healthz").content.decode()
    secret_line = pem.splitlines()[1]
    assert secret_line not in body
