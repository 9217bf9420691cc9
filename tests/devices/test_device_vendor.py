"""The device module as firmware ships it: a vendored copy with the public key compiled
in, imported in a fresh interpreter that can see nothing but that copy, the standard
library and ``cryptography`` (no Django, no project)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cryptography
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from devices.token import key_fingerprint, key_id, public_key_b64url, public_key_pem
from svccore.authority import sign_certificate
from svccore.keyfile import write_private_key
from tests.devices.device_support import DEVICE, NOW

REPO = Path(__file__).resolve().parents[2]
CRYPTOGRAPHY_SITE = str(Path(cryptography.__file__).resolve().parents[1])

# Runs inside `python -I`: only stdlib, the vendored copy and cryptography's site-packages
# are importable; a meta-path hook turns any Django import into a failure.
ISOLATED = """
import json, sys
vendored, crypto_site = sys.argv[1], sys.argv[2]
sys.path[:] = [p for p in sys.path if "-packages" not in p] + [vendored, crypto_site]

class NoFramework:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("django", "rest_framework", "tests", "licensing", "config"):
            raise ImportError(f"device module imported {name}")
        return None

sys.meta_path.insert(0, NoFramework())
import devices
assert devices.__file__.startswith(vendored), devices.__file__
args = json.loads(sys.argv[3])
result = {"pubkey": devices.pubkey.PUBLIC_KEY, "roots": list(devices.pubkey.ROOT_KEYS)}
claims = devices.verify_token(args["token"], args["key"] or devices.pubkey.PUBLIC_KEY)
result["lic"] = claims["lic"]
engine = devices.Engine(args["state"], public_key=args["key"], device_id=args["device"],
                        clock=lambda: args["now"], air_gapped=True)
result["state"] = engine.start(args["token"])
engine.require("detect")
with engine.open_stream() as stream:
    result["admitted"] = engine.admit_frame(stream)
engine.count(inferences=1, frames=1)
engine.close()
result["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("devices", "django"))
network = ("urllib.request", "http.client", "socket", "ssl", "subprocess", "email")
result["network"] = sorted(m for m in sys.modules if m in network)
print(json.dumps(result))
"""


def run_isolated(vendored: Path, *, token: str, key: str | None, state: Path) -> dict:
    args = {"token": token, "key": key, "device": DEVICE, "now": NOW, "state": str(state)}
    done = subprocess.run(
        [sys.executable, "-I", "-c", ISOLATED, str(vendored), CRYPTOGRAPHY_SITE, json.dumps(args)],
        cwd=vendored,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def vendor(pubkey_file: Path | None, out: Path, *extra: str) -> subprocess.CompletedProcess:
    key = ["--pubkey", str(pubkey_file)] if pubkey_file is not None else []
    return devices_cli("vendor", *key, "--out", str(out), *extra)


def devices_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devices", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_plain_copy_imports_alone_and_runs_with_configured_key(tmp_path, make_token, public_key):
    copy = tmp_path / "firmware"
    shutil.copytree(
        REPO / "devices", copy / "devices", ignore=shutil.ignore_patterns("__pycache__")
    )
    result = run_isolated(copy, token=make_token(), key=public_key, state=tmp_path / "state")
    assert (result["pubkey"], result["roots"]) == (None, [])
    assert result["lic"] == "LIC-0123456789"
    assert result["state"] == "active" and result["admitted"] is True
    assert not [m for m in result["modules"] if m.startswith("django")]
    assert result["network"] == []  # `import devices` + start/count load no networking


@pytest.mark.parametrize("form", ["pem", "b64url"])
def test_vendor_cli_compiles_the_key_in(tmp_path, make_token, signing_key, public_key, form):
    key_file = tmp_path / "signing.pub"
    if form == "pem":
        pem = signing_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        key_file.write_bytes(pem)
    else:
        key_file.write_text(public_key + "\n")
    done = vendor(key_file, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert key_fingerprint(public_key) in done.stdout
    result = run_isolated(tmp_path / "out", token=make_token(), key=None, state=tmp_path / "s")
    assert (result["pubkey"], result["roots"]) == (public_key, [])
    assert result["state"] == "active"
    leftovers = {p.name for p in (tmp_path / "out" / "devices").iterdir()} - {"__pycache__"}
    assert leftovers == {p.name for p in (REPO / "devices").glob("*.py")}


def test_vendor_cli_refuses_to_overwrite_without_force(tmp_path, public_key):
    key_file = tmp_path / "k.pub"
    key_file.write_text(public_key)
    assert vendor(key_file, tmp_path / "out").returncode == 0
    again = vendor(key_file, tmp_path / "out")
    assert again.returncode != 0 and "--force" in again.stderr
    assert vendor(key_file, tmp_path / "out", "--force").returncode == 0


def test_vendor_cli_rejects_a_file_that_is_not_a_public_key(tmp_path):
    key_file = tmp_path / "k.pub"
    key_file.write_text("not a key")
    done = vendor(key_file, tmp_path / "out")
    assert done.returncode != 0 and "not an Ed25519 public key" in done.stderr
    assert not (tmp_path / "out" / "devices").exists()


def test_device_module_source_imports_no_framework():
    framework = re.compile(r"^\s*(import|from)\s+(django|rest_framework)\b", re.MULTILINE)
    for source in (REPO / "devices").glob("*.py"):
        assert not framework.search(source.read_text()), source.name


# Runs inside `python -I` like ISOLATED: the vendored copy's compiled-in roots verify a
# token signed by a key they endorse, through the certificate that travels with it.
ISOLATED_ROOTS = """
import json, sys
vendored, crypto_site = sys.argv[1], sys.argv[2]
sys.path[:] = [p for p in sys.path if "-packages" not in p] + [vendored, crypto_site]
import devices
from devices.keys import Keyring
assert devices.__file__.startswith(vendored), devices.__file__
args = json.loads(sys.argv[3])
keyring = Keyring(roots=devices.pubkey.ROOT_KEYS)
keyring.add(args["cert"])
claims = devices.verify_token(args["token"], keyring)
print(json.dumps({
    "roots": list(devices.pubkey.ROOT_KEYS),
    "pubkey": devices.pubkey.PUBLIC_KEY,
    "annotation": str(devices.pubkey.__annotations__["ROOT_KEYS"]),
    "lic": claims["lic"],
    "kid": claims["kid"],
    "modules": sorted(m for m in sys.modules if m.split(".")[0] == "django"),
}))
"""


def run_isolated_roots(vendored: Path, *, token: str, cert: str) -> dict:
    args = json.dumps({"token": token, "cert": cert})
    done = subprocess.run(
        [sys.executable, "-I", "-c", ISOLATED_ROOTS, str(vendored), CRYPTOGRAPHY_SITE, args],
        cwd=vendored,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_vendor_cli_compiles_root_keys_in(tmp_path, make_token, public_key):
    root, second = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    (tmp_path / "root.pub").write_text(public_key_pem(root.public_key()))  # PEM
    (tmp_path / "root2.pub").write_text(public_key_b64url(second.public_key()) + "\n")
    roots = [public_key_b64url(root.public_key()), public_key_b64url(second.public_key())]
    done = vendor(
        None,
        tmp_path / "out",
        "--root", str(tmp_path / "root.pub"),
        "--root", str(tmp_path / "root2.pub"),
        "--root", str(tmp_path / "root.pub"),  # a repeated root is compiled in once
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"kid={key_id(root.public_key())}" in done.stdout
    assert f"kid={key_id(second.public_key())}" in done.stdout

    token = make_token()  # signed by the test signing key, which the second root endorses
    cert = sign_certificate(second, public_key, issued_at=0, not_before=0, use="offline")
    result = run_isolated_roots(tmp_path / "out", token=token, cert=cert)
    assert (result["roots"], result["pubkey"]) == (roots, None)
    assert result["annotation"] == "tuple[str, ...]"
    assert (result["lic"], result["kid"]) == ("LIC-0123456789", key_id(public_key))
    assert result["modules"] == []


def test_vendor_cli_compiles_roots_and_a_direct_key_together(tmp_path, make_token, public_key):
    root = Ed25519PrivateKey.generate()
    (tmp_path / "root.pub").write_text(public_key_b64url(root.public_key()))
    (tmp_path / "signing.pub").write_text(public_key)
    done = vendor(tmp_path / "signing.pub", tmp_path / "out", "--root", str(tmp_path / "root.pub"))
    assert done.returncode == 0, done.stderr
    assert "an Engine trusts only keys the roots certify" in done.stderr
    cert = sign_certificate(root, public_key, issued_at=0, not_before=0)
    result = run_isolated_roots(tmp_path / "out", token=make_token(), cert=cert)
    assert result["roots"] == [public_key_b64url(root.public_key())]
    assert result["pubkey"] == public_key and result["lic"] == "LIC-0123456789"


def test_vendor_cli_needs_a_root_or_a_key_and_refuses_a_private_root(tmp_path):
    neither = vendor(None, tmp_path / "out")
    assert neither.returncode == 2 and "--root" in neither.stderr
    private = tmp_path / "root.pem"
    write_private_key(private)
    refused = vendor(None, tmp_path / "out", "--root", str(private))
    assert refused.returncode != 0 and "is a private key" in refused.stderr
    assert not (tmp_path / "out" / "devices").exists()


def test_keyinfo_prints_fingerprint_and_kid(tmp_path, public_key):
    (tmp_path / "k.pub").write_text(public_key)
    done = devices_cli("keyinfo", "--pubkey", str(tmp_path / "k.pub"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        public_key,
        key_fingerprint(public_key),
        f"kid={key_id(public_key)}",
    ]
