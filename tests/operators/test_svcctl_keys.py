"""svcctl and the root of trust (issue 9), end to end through the installed console
script with no service and no database: a root key, key certificates, licences minted
with a certified air-gap key, inspecting the chain as a device would, and registering an
offline licence with the service (against a stand-in HTTP server: the endpoint is being
built beside this)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devices import keys as devkeys
from devices import token as codec
from svccore import authority
from svccore.keyfile import read_private_key

SVCCTL = Path(sys.executable).with_name("svcctl")
DAY = 86400


def svcctl(*args: str, env: dict | None = None, cwd: Path | None = None):
    """Run the installed console script without any Django settings or database."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "DJANGO_", "DATABASE_"))
    }
    return subprocess.run(
        [str(SVCCTL), *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def _json(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _root_of(pub: Path) -> dict:
    key = codec.load_public_key(pub.read_text())
    return {codec.key_id(key): key}


def _utc_day(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%d")


@pytest.fixture
def root(tmp_path) -> tuple[Path, Path]:
    key, pub = tmp_path / "root.pem", tmp_path / "root.pub"
    _json(svcctl("root-keygen", "--out", str(key), "--public-out", str(pub), "--json"))
    return key, pub


@pytest.fixture
def airgap(tmp_path) -> tuple[Path, Path]:
    key, pub = tmp_path / "airgap.pem", tmp_path / "airgap.pub"
    _json(svcctl("keygen", "--out", str(key), "--public-out", str(pub), "--json"))
    return key, pub


def mint(tmp_path: Path, key: Path, out: str, *extra: str):
    return svcctl(
        "mint", "--sku", "DETECT-STD", "--customer", "acme", "--device", "cam-42",
        "--days", "30", "--key", str(key), "--out", str(tmp_path / out), *extra,
    )  # fmt: skip


# --- root-keygen ---------------------------------------------------------------------------


def test_root_keygen_writes_mode_600_prints_kid_and_refuses_to_overwrite(tmp_path):
    key, pub = tmp_path / "root.pem", tmp_path / "root.pub"
    created = svcctl("root-keygen", "--out", str(key), "--public-out", str(pub))
    assert created.returncode == 0, created.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    public = read_private_key(key).public_key()
    assert codec.key_fingerprint(pub.read_text()) == codec.key_fingerprint(public)
    assert f"kid: {codec.key_id(public)}" in created.stdout
    assert f"fingerprint (sha256): {codec.key_fingerprint(public)}" in created.stdout
    assert "PRIVATE" not in created.stdout
    assert "offline machine" in created.stderr and "never on the server" in created.stderr
    before = key.read_bytes()

    again = svcctl("root-keygen", "--out", str(key))
    assert again.returncode == 1 and "already exists; pass --force" in again.stderr
    assert key.read_bytes() == before

    forced = _json(svcctl("root-keygen", "--out", str(key), "--force", "--json"))
    assert key.read_bytes() != before and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert forced["kid"] == codec.key_id(read_private_key(key).public_key())


def test_keygen_prints_the_kid(tmp_path):
    made = svcctl("keygen", "--out", str(tmp_path / "k.pem"))
    assert made.returncode == 0, made.stderr
    kid = codec.key_id(read_private_key(tmp_path / "k.pem").public_key())
    assert f"kid: {kid}" in made.stdout


# --- certify -------------------------------------------------------------------------------


def test_certify_writes_a_certificate_the_root_verifies(tmp_path, root, airgap):
    root_key, root_pub = root
    key, pub = airgap
    out = tmp_path / "airgap.cert"
    before = int(time.time())
    done = svcctl("certify", "--root", str(root_key), "--key", str(key), "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SVCK1.")
    cert = devkeys.parse_certificate(lines[0], _root_of(root_pub))
    kid = codec.key_id(pub.read_text())
    assert (cert.kid, cert.use, cert.not_after) == (kid, "online", 0)  # defaults
    assert before <= cert.not_before <= int(time.time())
    assert codec.public_key_b64url(cert.key) == codec.public_key_b64url(pub.read_text())
    for text in (
        f"kid          {kid}",
        f"fingerprint  {codec.key_fingerprint(pub.read_text())}",
        "use          online",
        f"root         {codec.key_id(root_pub.read_text())}",
        "valid until  no end",
    ):
        assert text in done.stdout

    # A public key file certifies the same key; an existing --out needs --force.
    again = svcctl("certify", "--root", str(root_key), "--key", str(pub), "--out", str(out))
    assert again.returncode == 1 and "already exists" in again.stderr
    forced = svcctl(
        "certify", "--root", str(root_key), "--key", str(pub), "--out", str(out), "--force"
    )
    assert forced.returncode == 0, forced.stderr
    assert devkeys.parse_certificate(out.read_text().strip(), _root_of(root_pub)).kid == kid


def test_certify_offline_use_for_a_number_of_days(tmp_path, root, airgap):
    out = tmp_path / "airgap.cert"
    info = _json(
        svcctl(
            "certify", "--root", str(root[0]), "--key", str(airgap[0]), "--out", str(out),
            "--use", "offline", "--days", "90", "--json",
        )
    )  # fmt: skip
    cert = devkeys.parse_certificate(out.read_text().strip(), _root_of(root[1]))
    assert cert.use == info["use"] == "offline"
    assert cert.not_after - cert.not_before == 90 * DAY
    assert (info["not_before"], info["not_after"]) == (cert.not_before, cert.not_after)
    assert info["certificate"] == str(out)


def test_certify_dates_are_whole_utc_days(tmp_path, root, airgap):
    start = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start += dt.timedelta(days=400)
    end = start + dt.timedelta(days=31)
    out = tmp_path / "later.cert"
    done = svcctl(
        "certify", "--root", str(root[0]), "--key", str(airgap[1]), "--out", str(out),
        "--not-before", _utc_day(start), "--not-after", _utc_day(end),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cert = devkeys.parse_certificate(out.read_text().strip(), _root_of(root[1]))
    assert cert.not_before == int(start.timestamp())
    assert cert.not_after == int(end.timestamp()) + DAY - 1  # through the end of that day


@pytest.mark.parametrize(
    ("window", "message"),
    [
        (["--not-before", "+400", "--not-after", "+399"], "would end"),
        (["--not-before", "-10", "--not-after", "-2"], "ended already"),
        (["--not-before", "2030-02-30"], "not a date (YYYY-MM-DD)"),
        (["--days", "0"], "must be >= 1"),
        (["--days", "3", "--not-after", "+9"], "not allowed with"),
        (["--use", "sometimes"], "invalid choice"),
    ],
)
def test_certify_refuses_a_bad_window_as_a_usage_error(tmp_path, root, airgap, window, message):
    today = dt.datetime.now(dt.UTC)
    args = [
        _utc_day(today + dt.timedelta(days=int(value)))
        if re.fullmatch(r"[+-]\d+", value)
        else value
        for value in window
    ]
    out = tmp_path / "x.cert"
    done = svcctl(
        "certify", "--root", str(root[0]), "--key", str(airgap[0]), "--out", str(out), *args
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "usage: svcctl" in done.stderr
    assert not out.exists()


def test_certify_refuses_key_files_readable_by_others_and_the_root_itself(tmp_path, root, airgap):
    out = tmp_path / "x.cert"
    airgap[0].chmod(0o644)
    loose_key = svcctl(
        "certify", "--root", str(root[0]), "--key", str(airgap[0]), "--out", str(out)
    )
    assert loose_key.returncode == 1 and "readable by group or others" in loose_key.stderr
    airgap[0].chmod(0o600)
    root[0].chmod(0o640)
    loose_root = svcctl(
        "certify", "--root", str(root[0]), "--key", str(airgap[1]), "--out", str(out)
    )
    assert loose_root.returncode == 1 and "readable by group or others" in loose_root.stderr
    root[0].chmod(0o600)
    itself = svcctl("certify", "--root", str(root[0]), "--key", str(root[1]), "--out", str(out))
    assert itself.returncode == 1 and "is the root key itself" in itself.stderr
    missing = svcctl(
        "certify", "--root", str(root[0]), "--key", str(tmp_path / "nope.pub"), "--out", str(out)
    )
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert not out.exists()


# --- mint with a certified air-gap key -----------------------------------------------------


@pytest.fixture
def certified(tmp_path, root, airgap) -> Path:
    """airgap.cert beside airgap.pem: an offline-use certificate from the root."""
    out = tmp_path / "airgap.cert"
    _json(
        svcctl(
            "certify", "--root", str(root[0]), "--key", str(airgap[0]), "--out", str(out),
            "--use", "offline", "--json",
        )
    )  # fmt: skip
    return out


def test_mint_with_a_certified_key_writes_the_token_then_the_certificate(
    tmp_path, root, airgap, certified
):
    done = mint(tmp_path, airgap[0], "cam.lic", "--json")  # finds airgap.cert beside the key
    minted = _json(done)
    assert "warning" not in done.stderr
    lines = (tmp_path / "cam.lic").read_text().splitlines()
    assert len(lines) == 2
    token, cert = lines
    assert cert == certified.read_text().strip()

    # What a device with the root compiled in does: take the file's certificate, then the
    # token through the keyring.
    keyring = devkeys.Keyring(roots=[root[1].read_text()])
    keyring.add(cert)
    claims = codec.verify_token(token, keyring)
    kid = codec.key_id(airgap[1].read_text())
    assert claims["kid"] == minted["kid"] == kid
    assert claims == minted["claims"]
    assert (claims["dev"], claims["act"]) == ("cam-42", "optional")
    assert minted["certificate"] == str(certified)
    assert [c["use"] for c in minted["certificates"]] == ["offline"]

    # The same with --cert and --root named explicitly; the table shows kid and certificate.
    named = tmp_path / "named.cert"
    named.write_text(certified.read_text())
    table = mint(tmp_path, airgap[0], "cam2.lic", "--cert", str(named), "--root", str(root[1]))
    assert table.returncode == 0, table.stderr
    assert f"kid          {kid}" in table.stdout
    assert f"certificate  {named} (root {codec.key_id(root[1].read_text())}, use offline)" in (
        table.stdout
    )
    assert (tmp_path / "cam2.lic").read_text().splitlines()[1] == cert


def test_mint_refuses_a_certificate_for_another_key(tmp_path, root, airgap, certified):
    other, other_pub = tmp_path / "other.pem", tmp_path / "other.pub"
    _json(svcctl("keygen", "--out", str(other), "--public-out", str(other_pub), "--json"))
    refused = mint(tmp_path, other, "x.lic", "--cert", str(certified))
    assert refused.returncode == 1
    assert (
        f"certifies key {codec.key_id(airgap[1].read_text())}, not the signing key "
        f"{codec.key_id(other_pub.read_text())}" in refused.stderr
    )
    assert not (tmp_path / "x.lic").exists()

    # A certificate whose kid names the air-gap key but whose key is another is refused,
    # even though the root really signed it.
    payload = authority.certificate_payload(
        public_key=other_pub.read_text(),
        root_public_key=root[1].read_text(),
        issued_at=0,
        not_before=0,
        use="offline",
    )
    payload["kid"] = codec.key_id(airgap[1].read_text())
    lying = authority.sign_document(devkeys.CERT_PREFIX, payload, read_private_key(root[0]))
    (tmp_path / "lying.cert").write_text(lying + "\n")
    lied = mint(tmp_path, other, "y.lic", "--cert", str(tmp_path / "lying.cert"))
    assert lied.returncode == 1 and "not a key certificate" in lied.stderr
    assert not (tmp_path / "y.lic").exists()

    # The root itself is no signing key.
    itself = mint(tmp_path, root[0], "z.lic", "--root", str(root[1]))
    assert itself.returncode == 1 and "is a root key" in itself.stderr


def test_mint_refuses_a_certificate_a_device_would_refuse(tmp_path, root, airgap, certified):
    other_root, other_root_pub = tmp_path / "r2.pem", tmp_path / "r2.pub"
    _json(
        svcctl(
            "root-keygen", "--out", str(other_root), "--public-out", str(other_root_pub), "--json"
        )
    )
    foreign = mint(tmp_path, airgap[0], "x.lic", "--root", str(other_root_pub))
    assert foreign.returncode == 1 and "KEY_UNTRUSTED_ROOT" in foreign.stderr

    ended = authority.sign_certificate(
        read_private_key(root[0]),
        read_private_key(airgap[0]).public_key(),
        issued_at=1_700_000_000,
        not_before=1_700_000_000,
        not_after=1_700_086_400,
        use="offline",
    )
    (tmp_path / "ended.cert").write_text(ended + "\n")
    expired = mint(tmp_path, airgap[0], "x.lic", "--cert", str(tmp_path / "ended.cert"))
    assert expired.returncode == 1 and "KEY_EXPIRED" in expired.stderr

    missing = mint(tmp_path, airgap[0], "x.lic", "--cert", str(tmp_path / "nope.cert"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert not (tmp_path / "x.lic").exists()


def test_mint_without_a_certificate_still_works_but_warns(tmp_path, root, airgap):
    done = mint(tmp_path, airgap[0], "legacy.lic")
    assert done.returncode == 0, done.stderr
    assert "warning" in done.stderr and "KEY_UNKNOWN" in done.stderr
    lines = (tmp_path / "legacy.lic").read_text().splitlines()
    assert len(lines) == 1  # a plain token file, as legacy builds read it
    assert codec.verify_token(lines[0], airgap[1].read_text())["dev"] == "cam-42"
    with pytest.raises(devkeys.KeyNotTrusted) as refused:
        codec.verify_token(lines[0], devkeys.Keyring(roots=[root[1].read_text()]))
    assert refused.value.code == "KEY_UNKNOWN"
    with_root = mint(tmp_path, airgap[0], "x.lic", "--root", str(root[1]))
    assert with_root.returncode == 1 and "no certificate for key" in with_root.stderr


# --- inspect --root ------------------------------------------------------------------------


def test_inspect_root_follows_the_chain_of_a_license_file(tmp_path, root, airgap, certified):
    _json(mint(tmp_path, airgap[0], "cam.lic", "--json"))
    lic = tmp_path / "cam.lic"
    kid = codec.key_id(airgap[1].read_text())
    root_kid = codec.key_id(root[1].read_text())

    human = svcctl("inspect", str(lic), "--root", str(root[1]))
    assert human.returncode == 0, human.stderr
    for text in (
        "signature        valid",
        f"kid              {kid}",
        f"key fingerprint  {codec.key_fingerprint(airgap[1].read_text())}",
        f"root chain       ok: key {kid} certified by root {root_kid} (use offline)",
        f"certificate      key {kid}, use offline, ",
        ", no end, root",
        "state            active",
        "device           cam-42",
    ):
        assert text in human.stdout

    report = _json(svcctl("inspect", str(lic), "--root", str(root[1]), "--json"))
    assert report["chain"]["trusted"] is True and report["chain"]["root"] == root_kid
    assert report["kid"] == kid and report["signature_valid"] is True
    [cert] = report["certificates"]
    assert (cert["kid"], cert["use"], cert["not_after"], cert["verified"]) == (
        kid,
        "offline",
        0,
        True,
    )

    # A licence file is accepted where a token file is: --pubkey alone, and both together.
    assert svcctl("inspect", str(lic), "--pubkey", str(airgap[1])).returncode == 0
    both = svcctl("inspect", str(lic), "--pubkey", str(airgap[1]), "--root", str(root[1]))
    assert both.returncode == 0 and "root chain       ok" in both.stdout


def test_inspect_root_refuses_a_key_that_does_not_chain(tmp_path, root, airgap, certified):
    _json(mint(tmp_path, airgap[0], "cam.lic", "--json"))
    other_root, other_pub = tmp_path / "r2.pem", tmp_path / "r2.pub"
    _json(svcctl("root-keygen", "--out", str(other_root), "--public-out", str(other_pub), "--json"))
    foreign = svcctl("inspect", str(tmp_path / "cam.lic"), "--root", str(other_pub), "--json")
    assert foreign.returncode == 1
    assert json.loads(foreign.stdout)["chain"]["code"] == "KEY_UNTRUSTED_ROOT"
    assert "does not chain" in foreign.stderr

    # Without its certificate line the key is unknown to a device, whatever the root.
    token_only = tmp_path / "token-only.lic"
    token_only.write_text((tmp_path / "cam.lic").read_text().splitlines()[0] + "\n")
    bare = svcctl("inspect", str(token_only), "--root", str(root[1]))
    assert bare.returncode == 1 and "KEY_UNKNOWN" in bare.stdout
    assert "device           cam-42" in bare.stdout  # the claims are still shown

    stray = tmp_path / "stray.lic"
    stray.write_text((tmp_path / "cam.lic").read_text() + "not a certificate\n")
    assert (
        "line 3 is not a key certificate"
        in svcctl("inspect", str(stray), "--root", str(root[1])).stderr
    )

    neither = svcctl("inspect", str(tmp_path / "cam.lic"))
    assert neither.returncode == 2 and "--pubkey FILE, --root FILE" in neither.stderr


# --- register ------------------------------------------------------------------------------


class StubService:
    """A stand-in for POST /v1/admin/licenses/register: records requests and answers
    with the next queued (status, body)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.answers: list[tuple[int, dict]] = []
        self.url = ""


@pytest.fixture
def stub():
    service = StubService()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            service.requests.append(
                {"path": self.path, "headers": dict(self.headers), "json": json.loads(raw)}
            )
            status, body = service.answers.pop(0)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    service.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_register_sends_the_token_and_prints_the_registration(tmp_path, airgap, certified, stub):
    minted = _json(mint(tmp_path, airgap[0], "cam.lic", "--json"))
    claims = minted["claims"]
    registered = {
        "license_id": claims["lic"],
        "customer_id": claims["sub"],
        "sku": claims["sku"],
        "device_id": claims["dev"],
        "expires_at": claims["exp"],
        "kid": claims["kid"],
        "registered": True,
    }
    stub.answers += [(201, registered), (201, registered)]
    env = {"SVC_URL": stub.url, "SVC_ADMIN_KEY": "op-key"}

    table = svcctl("register", str(tmp_path / "cam.lic"), env=env)
    assert table.returncode == 0, table.stderr
    for text in (
        f"licence     {claims['lic']}",
        "customer    CUST-ACME",
        "device      cam-42",
        f"kid         {claims['kid']}",
        "registered  yes",
    ):
        assert text in table.stdout
    request = stub.requests[0]
    assert request["path"] == "/v1/admin/licenses/register"
    assert request["headers"]["X-Admin-Key"] == "op-key"
    token = (tmp_path / "cam.lic").read_text().splitlines()[0]
    assert request["json"] == {"token": token}  # the first line only, not the certificate

    assert _json(svcctl("register", str(tmp_path / "cam.lic"), "--json", env=env)) == registered


@pytest.mark.parametrize(
    ("status", "detail"),
    [
        (409, "licence LIC-X is already registered"),
        (404, "customer CUST-ACME does not exist"),
        (403, "signing key 0123456789abcdef is not registered"),
        (400, "token does not verify"),
    ],
)
def test_register_refusals_print_the_servers_detail_and_exit_1(
    tmp_path, airgap, stub, status, detail
):
    _json(mint(tmp_path, airgap[0], "cam.lic", "--json"))
    stub.answers.append((status, {"detail": detail}))
    done = svcctl(
        "register", str(tmp_path / "cam.lic"), env={"SVC_URL": stub.url, "SVC_ADMIN_KEY": "k"}
    )
    assert done.returncode == 1
    assert f"{detail} (HTTP {status})" in done.stderr


def test_register_refuses_a_file_without_a_token_before_calling_the_service(tmp_path, stub):
    junk = tmp_path / "junk.lic"
    junk.write_text("not a token\n")
    env = {"SVC_URL": stub.url, "SVC_ADMIN_KEY": "k"}
    done = svcctl("register", str(junk), env=env)
    assert done.returncode == 1 and "holds no licence token" in done.stderr
    missing = svcctl("register", str(tmp_path / "nope.lic"), env=env)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    no_key = svcctl("register", str(junk), env={"SVC_URL": stub.url})
    assert no_key.returncode == 2
    assert stub.requests == []


@pytest.mark.live
def test_register_an_offline_license_with_the_live_service_then_revoke_it(
    live_service, transactional_db, tmp_path, root, airgap, certified
):
    """The whole air-gap path against the real service: the air-gap key's certificate
    is installed on the server (the service; its command is being built beside this),
    the licence minted offline is registered, a second time is 409, and the authority
    revokes it like any other licence."""
    from signing.services import signing_key_install

    signing_key_install(certificate=certified.read_text(), roots=[root[1].read_text()])
    env = {"SVC_URL": live_service.url, "SVC_ADMIN_KEY": live_service.admin_key}
    customer = _json(svcctl("customer", "Offline Site", "--kind", "end_user", "--json", env=env))
    minted = _json(
        svcctl(
            "mint", "--sku", "DETECT-STD", "--customer", customer["customer_id"],
            "--device", "cam-offline", "--days", "30", "--key", str(airgap[0]),
            "--out", str(tmp_path / "site.lic"), "--json",
        )
    )  # fmt: skip

    def register(path: Path, *extra: str):
        """Every server process knows the new key within signing.REFRESH_SECONDS (5 s);
        until then one that read the keys earlier answers 403 (unregistered key)."""
        deadline = time.monotonic() + 3 * 5
        while True:
            done = svcctl("register", str(path), *extra, env=env)
            if "HTTP 403" not in done.stderr or time.monotonic() > deadline:
                return done
            time.sleep(0.2)

    registered = _json(register(tmp_path / "site.lic", "--json"))
    assert registered["license_id"] == minted["license_id"]
    assert registered["kid"] == minted["kid"] == codec.key_id(airgap[1].read_text())
    assert (registered["device_id"], registered["registered"]) == ("cam-offline", True)

    again = register(tmp_path / "site.lic")
    assert again.returncode == 1 and "already registered (HTTP 409)" in again.stderr

    revoked = svcctl("revoke", minted["license_id"], "--reason", "site closed", env=env)
    assert revoked.returncode == 0, revoked.stderr
    assert "site closed" in revoked.stdout

    stranger = svcctl(
        "mint", "--sku", "DETECT-STD", "--customer", "CUST-NOBODY", "--device", "cam",
        "--key", str(airgap[0]), "--out", str(tmp_path / "nobody.lic"),
    )  # fmt: skip
    assert stranger.returncode == 0, stranger.stderr
    unknown = register(tmp_path / "nobody.lic")
    assert unknown.returncode == 1 and "HTTP 404" in unknown.stderr
