"""The signing key in an HSM (issue 14), with a real PKCS#11 module: SoftHSM2, a token
initialised here in a temporary directory (``SOFTHSM2_CONF``), so no system state is
touched. Faults with real parts: "unplugged" is the token's directory renamed away,
"locked" a PIN the token refuses, "slow" another process holding SoftHSM's own file
locks on the token, so C_Sign blocks inside the module."""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.core.management import CommandError, call_command

import devices
from config import clock
from devices import token as codec
from devices.documents import LIST_PREFIX, RECEIPT_PREFIX, verify_document
from licensing.models import Activation, Batch, License
from signing import keyring, pkcs11_token, signers
from tests.conftest import REPO, start_gunicorn, stop_gunicorn, tool_missing
from tests.licensing.key_support import certificate, install

MODULES = ("/usr/lib/softhsm/libsofthsm2.so", "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so")
MODULE = next((path for path in MODULES if Path(path).is_file()), "")


@pytest.fixture(scope="session", autouse=True)
def _softhsm_installed():
    # Session scope: set up before the session-scoped token below needs softhsm2-util.
    if not MODULE or shutil.which("softhsm2-util") is None:
        tool_missing("SoftHSM2 is not installed (`apt-get install softhsm2`; .ci/run installs it)")


TOKEN = "svc-test"
KEY = "svc-signing"
PIN = "4912-7730"
SO_PIN = "88120034"

# Holds SoftHSM's file locks on every file of the token until its stdin closes.
LOCKER = """
import fcntl, sys
from pathlib import Path
held = []
for path in sorted(Path(sys.argv[1]).iterdir()):
    handle = open(path, "r+b")
    fcntl.lockf(handle, fcntl.LOCK_EX)
    held.append(handle)
print("locked", flush=True)
sys.stdin.read()
"""


@dataclass
class Hsm:
    conf: Path
    tokens: Path
    pin_file: Path
    public: Ed25519PublicKey

    @property
    def token_dir(self) -> Path:
        (directory,) = [p for p in self.tokens.iterdir() if p.is_dir()]
        return directory

    def environment(self, **extra: str) -> dict[str, str]:
        return {
            "SOFTHSM2_CONF": str(self.conf),
            "SVC_SIGNER": "pkcs11",
            "SVC_PKCS11_MODULE": MODULE,
            "SVC_PKCS11_TOKEN_LABEL": TOKEN,
            "SVC_PKCS11_KEY_LABEL": KEY,
            "SVC_PKCS11_PIN_FILE": str(self.pin_file),
            **extra,
        }

    @contextlib.contextmanager
    def unplugged(self):
        """The token gone from the module's view while inside (its directory moved out
        of the token directory: SoftHSM2 takes every directory inside for a token)."""
        directory = self.token_dir
        away = self.tokens.parent / (directory.name + ".unplugged")
        directory.rename(away)
        try:
            yield
        finally:
            away.rename(directory)

    @contextlib.contextmanager
    def busy(self):
        """Another process holds the token's locks: signatures block until it lets go."""
        locker = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(self.token_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert locker.stdout.readline().strip() == "locked"
            yield
        finally:
            locker.stdin.close()
            locker.wait(timeout=10)

    def set_pin(self, pin: str) -> None:
        self.pin_file.write_text(pin + "\n")


@pytest.fixture(scope="session")
def hsm(tmp_path_factory) -> Hsm:
    """A SoftHSM2 token with the service's Ed25519 key pair, made by the signer module's
    own key generation (what `manage.py keygen` runs). One per session: the module reads
    SOFTHSM2_CONF when this process first loads it (pytest-django runs the transactional
    tests last, after other modules, so a module-scoped token would be made twice)."""
    root = tmp_path_factory.mktemp("softhsm")
    tokens = root / "tokens"
    tokens.mkdir()
    conf = root / "softhsm2.conf"
    conf.write_text(
        f"directories.tokendir = {tokens}\nobjectstore.backend = file\n"
        "log.level = ERROR\nslots.removable = false\n"
    )
    old = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(conf)  # read by the module at C_Initialize
    subprocess.run(
        ["softhsm2-util", "--init-token", "--free", "--label", TOKEN]
        + ["--pin", PIN, "--so-pin", SO_PIN],
        check=True,
        capture_output=True,
    )
    pin_file = root / "pin"
    pin_file.write_text(PIN + "\n")
    pin_file.chmod(0o600)
    config = pkcs11_token.Pkcs11Config(MODULE, TOKEN, KEY, str(pin_file), timeout=5, sessions=4)
    public = pkcs11_token.generate_key(config)
    yield Hsm(conf=conf, tokens=tokens, pin_file=pin_file, public=public)
    if old is None:
        os.environ.pop("SOFTHSM2_CONF", None)
    else:
        os.environ["SOFTHSM2_CONF"] = old


@pytest.fixture
def in_token(hsm, settings) -> Hsm:
    """This process signs with the token's key (settings of SVC_SIGNER=pkcs11)."""
    hsm.set_pin(PIN)
    settings.SVC_SIGNER = "pkcs11"
    settings.SVC_PKCS11_MODULE = MODULE
    settings.SVC_PKCS11_TOKEN_LABEL = TOKEN
    settings.SVC_PKCS11_KEY_LABEL = KEY
    settings.SVC_PKCS11_PIN_FILE = str(hsm.pin_file)
    settings.SVC_PKCS11_TIMEOUT = 3.0
    settings.SVC_PKCS11_SESSIONS = 4
    keyring.keys_changed()
    yield hsm
    keyring.keys_changed()


def activate(client, token: str, device_id: str):
    return client.post(
        "/v1/activate", {"batch_token": token, "device_id": device_id}, format="json"
    )


def eventually(call, *, seconds: float = 10.0):
    """``call()`` until it returns something true (the signer retries a token once a
    second), failing after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        result = call()
        if result:
            return result
        assert time.monotonic() < deadline, "the service did not recover"
        time.sleep(0.1)


# --- keys in the token --------------------------------------------------------------------


@pytest.mark.django_db
def test_keygen_creates_a_non_extractable_key_in_the_token_and_prints_its_ids(in_token):
    out = io.StringIO()
    call_command("keygen", "--label", "svc-next", stdout=out)
    text = out.getvalue()
    (line,) = [x for x in text.splitlines() if x.startswith("public key (base64url): ")]
    public = codec.load_public_key(line.split(": ", 1)[1])
    assert f"fingerprint (sha256): {codec.key_fingerprint(public)}" in text
    assert f"key id (kid): {codec.key_id(public)}" in text
    assert f"PKCS#11 token '{TOKEN}'" in text and "'svc-next'" in text
    assert "PRIVATE KEY" not in text and PIN not in text
    config = pkcs11_token.pkcs11_config(key_label="svc-next")
    token = pkcs11_token.find_token(pkcs11_token.library(MODULE), config)
    with pkcs11_token.login(token, config, PIN) as session:
        private = pkcs11_token.private_key_of(session, config)
        assert private[pkcs11_token.Attribute.EXTRACTABLE] is False
        assert private[pkcs11_token.Attribute.SENSITIVE] is True
        assert private[pkcs11_token.Attribute.NEVER_EXTRACTABLE] is True
        assert pkcs11_token.raw_public(
            pkcs11_token.public_key_of(session, config)
        ) == codec.public_key_raw(public)
    with pytest.raises(CommandError, match="already holds a key labelled 'svc-next'"):
        call_command("keygen", "--label", "svc-next", stdout=io.StringIO())
    with pytest.raises(CommandError, match="use --label"):
        call_command("keygen", "--out", "/tmp/x.pem", stdout=io.StringIO())


@pytest.mark.django_db
def test_activation_is_signed_in_the_token_and_healthz_names_the_signer(
    in_token, device_api, make_batch, client
):
    batch = make_batch(units=3)  # the batch key is signed in the token too
    assert codec.verify_token(batch.license.token, in_token.public)["kid"] == codec.key_id(
        in_token.public
    )
    response = activate(device_api, batch.license.token, "cam-1")
    assert response.status_code == 200
    claims = codec.verify_token(response.json()["unit_token"], in_token.public)
    assert claims["dev"] == "cam-1" and claims["kid"] == codec.key_id(in_token.public)
    verify_document(LIST_PREFIX, response.json()["revocations"], in_token.public)
    health = client.get("/healthz")
    assert health.status_code == 200
    assert health.json()["signer"] == "pkcs11"
    assert health.json()["public_key"] == codec.key_fingerprint(in_token.public)


def test_signatures_from_many_threads_share_the_session_pool(in_token):
    signer = keyring.signing_key()
    messages = [f"message {n}".encode() for n in range(400)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        signatures = list(pool.map(signer.sign, messages))
    for message, signature in zip(messages, signatures, strict=True):
        in_token.public.verify(signature, message)


@pytest.mark.django_db
def test_key_certificates_and_rotation_work_as_with_a_key_file(
    in_token, settings, device_api, make_batch, tmp_path
):
    root = Ed25519PrivateKey.generate()
    batch = make_batch(units=3)
    old_unit = activate(device_api, batch.license.token, "cam-1").json()["unit_token"]
    # Roots configured: the token's key signs once a root's certificate is installed.
    settings.SVC_ROOT_KEYS = [codec.public_key_b64url(root.public_key())]
    keyring.keys_changed()
    refused = activate(device_api, batch.license.token, "cam-2")
    assert refused.status_code == 503  # a balancer tries another node
    assert "SVC_PKCS11_KEY_LABEL" in refused.json()["detail"]
    install(tmp_path, certificate(root, in_token.public), "hsm.cert")
    assert activate(device_api, batch.license.token, "cam-2").status_code == 200
    # Rotation: a new key pair in the token, certified, then the label switched.
    out = io.StringIO()
    call_command("keygen", "--label", "svc-rotated", stdout=out)
    line = next(x for x in out.getvalue().splitlines() if x.startswith("public key (base64url)"))
    new_public = codec.load_public_key(line.split(": ", 1)[1])
    install(tmp_path, certificate(root, new_public), "rotated.cert")
    settings.SVC_PKCS11_KEY_LABEL = "svc-rotated"
    keyring.keys_changed()
    answer = activate(device_api, batch.license.token, "cam-3").json()
    assert codec.verify_token(answer["unit_token"], new_public)["kid"] == codec.key_id(new_public)
    assert keyring.verify(old_unit)["dev"] == "cam-1"  # the old key's licences still verify
    assert len(answer["certificates"]) == 2  # both keys' certificates travel with it


# --- faults, in this process --------------------------------------------------------------


def _seats(batch) -> tuple[int, int, int]:
    batch.refresh_from_db()
    return (
        batch.units_activated,
        License.objects.filter(batch=batch).count(),
        Activation.objects.filter(batch=batch).count(),
    )


@pytest.mark.django_db
def test_unplugged_token_is_503_rolls_the_activation_back_and_recovers(
    in_token, device_api, make_batch, client
):
    batch = make_batch(units=3)
    assert activate(device_api, batch.license.token, "cam-1").status_code == 200
    before = _seats(batch)
    with in_token.unplugged():
        response = activate(device_api, batch.license.token, "cam-2")
        assert response.status_code == 503
        assert response["Retry-After"] == "2"
        assert f"PKCS#11 token '{TOKEN}'" in response.json()["detail"]
        # The seat was taken by the UPDATE before the signature failed: rolled back.
        assert _seats(batch) == before
        assert not Activation.objects.filter(device_id="cam-2").exists()
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.json()["signer"] == "pkcs11" and TOKEN in health.json()["detail"]
    recovered = eventually(
        lambda: (r := activate(device_api, batch.license.token, "cam-2")).status_code == 200 and r
    )
    codec.verify_token(recovered.json()["unit_token"], in_token.public)
    assert _seats(batch) == (before[0] + 1, before[1] + 1, before[2] + 1)
    assert client.get("/healthz").status_code == 200


@pytest.mark.django_db
def test_refused_pin_is_a_clear_503_until_the_pin_is_right(in_token, device_api, make_batch):
    batch = make_batch(units=3)
    assert activate(device_api, batch.license.token, "cam-1").status_code == 200
    with in_token.unplugged():  # the token comes back, and the PIN file is wrong now
        assert activate(device_api, batch.license.token, "cam-2").status_code == 503
        in_token.set_pin("0000-0000")
    time.sleep(signers.RETRY_SECONDS)  # the next signature reconnects and logs in again
    response = activate(device_api, batch.license.token, "cam-2")
    assert response.status_code == 503
    detail = response.json()["detail"]
    assert f"refused the PIN from {in_token.pin_file}" in detail
    assert "0000" not in detail and PIN not in detail
    time.sleep(signers.RETRY_SECONDS)  # past the retry pause: the same PIN is still not sent
    again = activate(device_api, batch.license.token, "cam-2")
    assert again.status_code == 503 and "not tried again until it changes" in again.json()["detail"]
    assert _seats(batch)[0] == 1
    in_token.set_pin(PIN)
    eventually(lambda: activate(device_api, batch.license.token, "cam-2").status_code == 200)
    assert _seats(batch) == (2, 2, 2)


@pytest.mark.django_db
def test_slow_token_answers_503_within_the_timeout_and_recovers(
    in_token, settings, device_api, make_batch
):
    settings.SVC_PKCS11_TIMEOUT = 0.5
    keyring.keys_changed()
    batch = make_batch(units=3)
    assert activate(device_api, batch.license.token, "cam-1").status_code == 200
    with in_token.busy():
        started = time.monotonic()
        response = activate(device_api, batch.license.token, "cam-2")
        elapsed = time.monotonic() - started
        assert response.status_code == 503
        assert "did not answer within 0.5 s (SVC_PKCS11_TIMEOUT)" in response.json()["detail"]
        assert elapsed < 2.0
        assert _seats(batch) == (1, 1, 1)
    eventually(lambda: activate(device_api, batch.license.token, "cam-2").status_code == 200)
    assert _seats(batch) == (2, 2, 2)


def test_start_up_stops_on_a_token_key_that_is_not_there(hsm, signing_key_file):
    env = {
        **os.environ,
        **hsm.environment(SVC_PKCS11_KEY_LABEL="no-such-key"),
        "SVC_SECRET_KEY": "x" * 50,
        "DATABASE_URL": "sqlite:///:memory:",
    }
    result = subprocess.run(
        [sys.executable, "-c", "import config.wsgi"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "no public key labelled 'no-such-key' (SVC_PKCS11_KEY_LABEL)" in result.stderr
    assert PIN not in result.stderr + result.stdout


def test_a_worker_starting_while_the_token_is_out_of_view_waits_for_it(hsm, signing_key_file):
    """A gunicorn worker (re)started while the token is briefly not listed (unplugged,
    or SoftHSM's files busy) waits for it, up to pkcs11_token.CONNECT_SECONDS, instead of
    failing to boot, which stops the whole server."""
    env = {
        **os.environ,
        **hsm.environment(),
        "SVC_SECRET_KEY": "x" * 50,
        "DATABASE_URL": "sqlite:///:memory:",
    }
    with hsm.unplugged():
        process = subprocess.Popen(
            [sys.executable, "-c", "import config.wsgi; print('served')"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)
        assert process.poll() is None  # still waiting for the token
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-2000:]
    assert out.strip() == "served"


# --- against a live gunicorn --------------------------------------------------------------


@pytest.fixture(scope="session")
def hsm_clock(tmp_path_factory) -> Path:
    """The clock file the HSM service follows (``SVC_TEST_CLOCK_FILE``): the real time
    unless a test shifts it (:func:`config.clock.shift_to`) and puts it back."""
    path = tmp_path_factory.mktemp("hsm-clock") / "clock"
    clock.shift_to(path, 0)
    return path


@pytest.fixture(scope="session")
def hsm_service(hsm, hsm_clock, django_db_setup, tmp_path_factory):
    """gunicorn (3 gthread workers x 4 threads) signing in the token."""
    service = start_gunicorn(
        tmp_path_factory.mktemp("gunicorn-hsm"),
        preload=False,  # each worker opens its own session on the token
        **hsm.environment(SVC_PKCS11_TIMEOUT="1"),
        SVC_TEST_CLOCK_FILE=str(hsm_clock),
    )
    yield service
    stop_gunicorn(service)


def _post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        url,
        method="POST",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error), dict(error.headers)


def _health(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_activation_usage_and_revocation_signed_in_the_token_on_live_gunicorn(
    hsm, hsm_service, hsm_clock, customer, tmp_path
):
    try:
        _camera_signed_in_the_token(hsm, hsm_service, hsm_clock, customer, tmp_path)
    finally:
        clock.shift_to(hsm_clock, 0)


def _camera_signed_in_the_token(hsm, hsm_service, hsm_clock, customer, tmp_path) -> None:
    status, health = _health(hsm_service.url)
    assert status == 200 and health["signer"] == "pkcs11"
    assert health["public_key"] == codec.key_fingerprint(hsm.public)
    public = codec.public_key_b64url(hsm.public)
    batch = hsm_service.admin(
        "POST", "/v1/admin/batches", {"customer_id": customer.id, "sku": "VISION-PRO", "units": 2}
    )
    codec.verify_token(batch["batch_token"], hsm.public)
    state = tmp_path / "camera"
    unit_token = devices.activate(
        hsm_service.url, batch["batch_token"], state, device_id="cam-hsm", allow_http=True
    )
    assert codec.verify_token(unit_token, hsm.public)["dev"] == "cam-hsm"
    hour = 3600
    now = [float((int(time.time()) // hour + 1) * hour + 10)]  # after the token's iat
    engine = devices.Engine(state, public_key=public, device_id="cam-hsm", clock=lambda: now[0])
    assert engine.start() == "active"
    engine.count(inferences=70)
    now[0] += hour
    # The service's clock too: the camera's first hour has ended (a record may not end in
    # the service's future, contract §7).
    clock.shift_to(hsm_clock, now[0] - time.time())
    engine.count(inferences=1)
    synced = engine.sync(hsm_service.url, allow_http=True)  # receipt and list page verified
    assert (synced["accepted"], synced["refused"]) == (1, 0)
    status, usage, _ = _post(
        f"{hsm_service.url}/v1/usage",
        {"device_id": "cam-hsm", "license_id": engine.license_id, "records": [], "nonce": "n1"},
        {"Authorization": f"Bearer {unit_token}"},
    )
    assert status == 200
    assert verify_document(RECEIPT_PREFIX, usage["receipt"], hsm.public)["inferences"] == 70
    hsm_service.admin("POST", "/v1/admin/revoke", {"license_id": engine.license_id})
    # The worker that answers the list may hold the head it read up to SVC_LIST_HEAD_SECONDS
    # (1 s, the production default) before the revocation; past that every worker reads it.
    time.sleep(1.1)
    with urllib.request.urlopen(f"{hsm_service.url}/v1/revocations?since=0") as response:
        page = json.load(response)["revocations"]
    revoked = verify_document(LIST_PREFIX, page, hsm.public)["revoked"]
    assert engine.license_id in [license_id for license_id, _ in revoked]
    with pytest.raises(devices.Revoked):
        now[0] += hour
        engine.sync(hsm_service.url, allow_http=True)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_live_service_answers_503_while_the_token_is_out_and_recovers_by_itself(
    hsm, hsm_service, customer
):
    batch = hsm_service.admin(
        "POST", "/v1/admin/batches", {"customer_id": customer.id, "sku": "VISION-PRO", "units": 50}
    )
    url, token = hsm_service.url, batch["batch_token"]

    def activate_live(device: str) -> tuple[int, dict, dict]:
        return _post(f"{url}/v1/activate", {"batch_token": token, "device_id": device})

    assert activate_live("warm-0")[0] == 200

    def seats() -> int:
        return hsm_service.admin("GET", f"/v1/admin/batches/{batch['batch_id']}")["units_activated"]

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        with hsm.unplugged():
            answers = list(pool.map(activate_live, [f"out-{n}" for n in range(24)]))
            assert {status for status, _, _ in answers} == {503}
            assert all(TOKEN in body["detail"] for _, body, _ in answers)
            assert all(headers["Retry-After"] == "2" for _, _, headers in answers)
            assert seats() == 1  # no seat taken without its licence
            assert Batch.objects.get(pk=batch["batch_id"]).units_activated == 1
            assert not License.objects.filter(device_id__startswith="out-").exists()
            assert _health(url)[0] == 503
        # Back in: every worker reconnects by itself, no restart (each at most once a
        # second after its last failure, so a request may still meet one that has not
        # yet: it is asked again, as a device would, and never takes a seat meanwhile).
        eventually(lambda: all(_health(url)[0] == 200 for _ in range(12)))

        def activate_when_back(device: str) -> tuple[int, dict, dict]:
            return eventually(lambda: (answer := activate_live(device))[0] == 200 and answer)

        answers = list(pool.map(activate_when_back, [f"back-{n}" for n in range(24)]))
        assert {status for status, _, _ in answers} == {200}
        for _, body, _ in answers:
            codec.verify_token(body["unit_token"], hsm.public)
        assert seats() == 25

        with hsm.busy():  # slow: a 1 s timeout (SVC_PKCS11_TIMEOUT) answers for it
            started = time.monotonic()
            status, body, _ = activate_live("slow-1")
            assert status == 503 and "did not answer within 1 s" in body["detail"]
            assert time.monotonic() - started < 5
        eventually(lambda: activate_live("slow-1")[0] == 200)
    assert seats() == 26
    assert Batch.objects.get(pk=batch["batch_id"]).units_activated == 26
