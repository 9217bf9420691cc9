"""Signing-key rotation end to end, as the runbook in docs/signing-keys.md does it, with
real parts: ``svcctl`` makes the root and certificates offline, ``manage.py`` installs, retires and
revokes keys, gunicorn is restarted on the new key, and the cameras run a copy of the
device module vendored with the root BEFORE the rotation, in a fresh interpreter that
sees nothing but that copy, the standard library and ``cryptography``.

Old devices keep working without a firmware update, new tokens carry the new key id,
the retired key's tokens keep verifying, the revoked key's stop, and a licence minted
fully offline with an air-gap key is registered, then revoked through the signed list.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import cryptography
import pytest
from django.core.management import call_command

from devices import token as codec
from signing import keyring
from svccore import authority
from svccore.keyfile import read_private_key
from tests.conftest import REPO, start_gunicorn, stop_gunicorn

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

CRYPTOGRAPHY_SITE = str(Path(cryptography.__file__).resolve().parents[1])

# Runs in `python -I` with only the vendored copy, the standard library and cryptography.
DEVICE = """
import json, sys, time
vendored, crypto_site, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path[:] = [p for p in sys.path if "-packages" not in p] + [vendored, crypto_site]
import devices
assert devices.__file__.startswith(vendored)
state, device, url = args["state"], args["device"], args["url"]
out = {}

def attempt(name, call):
    try:
        out[name] = call()
    except devices.LicenseError as exc:
        out[name] = exc.code
        out[name + ":detail"] = str(exc)

offset = args.get("offset", 0)  # the camera's clock: real time plus this

def engine():
    return devices.Engine(state, device_id=device, clock=lambda: time.time() + offset)

for step in args["steps"]:
    kind = step.split("#")[0]  # "start#2": a second start in the same run
    if kind == "activate":
        attempt(step, lambda: devices.activate(url, args["batch_token"], state,
                                                device_id=device, allow_http=True)[:4])
    elif kind == "install":
        open(state + "/license.token", "w").write(open(args["license_file"]).read())
        out[step] = "ok"
    elif kind == "start":
        def start():
            e = engine()
            try:
                return e.start()
            finally:
                e.close()
        attempt(step, start)
    elif kind == "count":
        def count():
            e = engine()
            try:
                e.start()
                e.count(inferences=5)
                return e.claims["kid"]
            finally:
                e.close()
        attempt(step, count)
    elif kind == "sync":
        def sync():
            e = engine()
            try:
                return e.sync(url, allow_http=True)["list_seq"]
            finally:
                e.close()
        attempt(step, sync)
    elif kind == "sync-summary":  # a running camera's sync: what it did, raised or not
        e = engine()
        try:
            e.start()
            summary, code = e.sync(url, allow_http=True), "ok"
        except devices.LicenseError as exc:
            summary, code = getattr(exc, "summary", {}), exc.code
        finally:
            e.close()
        out[step] = {"code": code, **{name: summary.get(name) for name in
                     ("license", "errors", "accepted", "pending")}}
print(json.dumps(out))
"""


def device(vendored: Path, state: Path, name: str, url: str, *steps: str, **extra) -> dict:
    state.mkdir(exist_ok=True)
    args = {"state": str(state), "device": name, "url": url, "steps": steps, **extra}
    done = subprocess.run(
        [sys.executable, "-I", "-c", DEVICE, str(vendored), CRYPTOGRAPHY_SITE, json.dumps(args)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def tool(*args: str, **env: str) -> str:
    """``svcctl`` (offline or online) or ``python -m devices`` as an operator runs it."""
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=60,
        check=False, env={"PATH": "/usr/bin:/bin", **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def manage(command: str, *args: str, **options) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out, **options)
    keyring.keys_changed()
    return out.getvalue()


def healthz(service) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"{service.url}/healthz", timeout=10) as response:
        return json.load(response)


def test_rotation_runbook(tmp_path, settings, customer, signing_key_file, signing_key):
    root = tmp_path / "root.pem"
    tool("-m", "svcctl", "root-keygen", "--out", str(root), "--public-out", f"{root}.pub")
    settings.SVC_ROOT_KEYS = [Path(f"{root}.pub").read_text().strip()]
    roots_env = {"SVC_ROOT_KEYS": f"{root}.pub"}

    # Key 1 (the running key) is certified by the root and installed.
    first_cert = tmp_path / "key1.cert"
    tool("-m", "svcctl", "certify", "--root", str(root), "--key", str(signing_key_file),
         "--out", str(first_cert), "--not-before", "2020-01-01")  # fmt: skip
    manage("key_install", str(first_cert))
    kid1 = codec.key_id(signing_key.public_key())

    # Firmware is vendored with the root compiled in, before any rotation.
    vendored = tmp_path / "firmware"
    tool("-m", "devices", "vendor", "--root", f"{root}.pub", "--out", str(vendored))

    service = start_gunicorn(tmp_path, **roots_env)
    try:
        assert healthz(service)["kid"] == kid1
        batch = service.admin(
            "POST",
            "/v1/admin/batches",
            {"customer_id": customer.id, "sku": "VISION-PRO", "units": 5},
        )
        steps = ("activate", "start", "count", "sync")
        old = device(
            vendored, tmp_path / "old", "cam-old", service.url, *steps,
            batch_token=batch["batch_token"],
        )  # fmt: skip
        assert (old["activate"], old["start"], old["count"]) == ("SVC1", "active", kid1), old
        assert isinstance(old["sync"], int), old
    finally:
        stop_gunicorn(service)

    # Rotation: a new key, certified offline by the root, installed, deployed.
    second = tmp_path / "key2.pem"
    manage("keygen", "--out", str(second))
    second_cert = tmp_path / "key2.cert"
    tool("-m", "svcctl", "certify", "--root", str(root), "--key", str(second),
         "--out", str(second_cert))  # fmt: skip
    manage("key_install", str(second_cert))
    kid2 = codec.key_id(read_private_key(second).public_key())
    service = start_gunicorn(tmp_path, SVC_SIGNING_KEY_FILE=str(second), **roots_env)
    try:
        assert healthz(service)["kid"] == kid2
        # The camera vendored before the rotation keeps working: it learns key 2's
        # certificate from the answers and still runs its key-1 licence.
        after = device(vendored, tmp_path / "old", "cam-old", service.url, "sync", "start", "count")
        assert (after["start"], after["count"]) == ("active", kid1), after
        assert isinstance(after["sync"], int), after
        # A camera activated now gets a key-2 licence, and also runs on the old firmware.
        new = device(vendored, tmp_path / "new", "cam-new", service.url,
                     "activate", "start", "count", batch_token=batch["batch_token"])  # fmt: skip
        assert (new["start"], new["count"]) == ("active", kid2), new

        # Retire key 1: its licences keep verifying on devices and on the service, and a
        # camera that syncs gets its licence re-signed by key 2 (the fleet moves over).
        old_token = (tmp_path / "old" / "license.token").read_text().splitlines()[0]
        manage("key_retire", kid1)
        # Other processes see the retirement within keyring.REFRESH_SECONDS: sync until
        # the service answers the re-signed licence (bounded).
        deadline = time.monotonic() + keyring.REFRESH_SECONDS + 10
        while True:
            retired = device(
                vendored, tmp_path / "old", "cam-old", service.url, "sync", "start", "count"
            )
            if retired["count"] == kid2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert (retired["start"], retired["count"]) == ("active", kid2), retired
        assert isinstance(retired["sync"], int), retired

        # An air-gap key mints a licence fully offline; it is registered, then revoked.
        airgap = tmp_path / "airgap.pem"
        tool("-m", "svcctl", "keygen", "--out", str(airgap), "--public-out", f"{airgap}.pub")
        airgap_cert = tmp_path / "airgap.cert"
        tool("-m", "svcctl", "certify", "--root", str(root), "--key", str(airgap),
             "--use", "offline", "--out", str(airgap_cert))  # fmt: skip
        manage("key_install", str(airgap_cert))
        license = tmp_path / "cam-air.lic"
        tool("-m", "svcctl", "mint", "--sku", "DETECT-STD", "--customer", customer.id,
             "--device", "cam-air", "--days", "30", "--key", str(airgap),
             "--cert", str(airgap_cert), "--out", str(license))  # fmt: skip
        token = license.read_text().splitlines()[0]
        license_id = codec.decode_unverified(token)["lic"]
        online = {"SVC_URL": service.url, "SVC_ADMIN_KEY": service.admin_key}
        tool("-m", "svcctl", "register", str(license), **online)
        air = device(vendored, tmp_path / "air", "cam-air", service.url,
                     "install", "start", "sync", "start#2", license_file=str(license))  # fmt: skip
        assert air["start"] == "SYNC_REQUIRED", air  # an online device looks it up first
        assert air["start#2"] == "active", air
        tool("-m", "svcctl", "revoke", license_id, "--reason", "stolen", **online)
        air = device(vendored, tmp_path / "air", "cam-air", service.url, "sync", "start")
        assert air["start"] == "LICENSE_REVOKED", air

        # Revoke key 1 (a leaked key): the licences it signed were re-signed as their
        # cameras came back; what the leaked key signs now stops at the device's sync.
        manage("key_revoke", kid1, reason="leaked")
        healed = device(vendored, tmp_path / "old", "cam-old", service.url, "sync", "start")
        assert healed["start"] == "active", healed
        claims = codec.decode_unverified(old_token)
        forged_file = tmp_path / "forged.lic"
        forged_file.write_text(
            authority.encode_token(claims | {"dev": "cam-forged"}, signing_key) + "\n"
        )
        forged = device(vendored, tmp_path / "forged", "cam-forged", service.url,
                        "install", "sync", "start", license_file=str(forged_file))  # fmt: skip
        assert forged["start"] == "KEY_REVOKED", forged
        still = device(vendored, tmp_path / "new", "cam-new", service.url, "sync", "start")
        assert still["start"] == "active", still
    finally:
        stop_gunicorn(service)


def units_activated(service, batch_id: str) -> int:
    return service.admin("GET", f"/v1/admin/batches/{batch_id}")["units_activated"]


def license_refresh(service, token: str, device_id: str) -> tuple[int, dict]:
    """``GET /v1/license`` as a camera's sync asks it: (status, JSON body or {})."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{service.url}/v1/license?device_id={device_id}",
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as answer:
        return answer.code, json.loads(answer.read() or b"{}")


def test_revocation_runbook_keeps_batches_in_firmware_activating(
    tmp_path, settings, server_clock, customer, signing_key_file, signing_key
):
    """docs/signing-keys.md, "What a rotation does to batches, licences and cameras",
    step by step: a batch issued under key 1 and cameras activated from it; key 2 made,
    certified, installed and deployed (runbook steps 1-4); key 1 revoked (step 5). Then
    the batch key in firmware still activates (a known camera without a second seat, a
    new one with one), answered with key-2 licences; a camera that only syncs gets its
    licence re-signed and its usage uploaded under it; a batch key or licence forged
    with key 1 is refused and recorded; the cameras run on the key-2 licences."""
    from audit.models import AuditEntry
    from events.models import Event
    from licensing.exact_tokens import COMPROMISE_ACTION

    root = tmp_path / "root.pem"
    tool("-m", "svcctl", "root-keygen", "--out", str(root), "--public-out", f"{root}.pub")
    settings.SVC_ROOT_KEYS = [Path(f"{root}.pub").read_text().strip()]
    env = {"SVC_ROOT_KEYS": f"{root}.pub", "SVC_TEST_CLOCK_FILE": str(server_clock.path)}
    first_cert = tmp_path / "key1.cert"
    tool("-m", "svcctl", "certify", "--root", str(root), "--key", str(signing_key_file),
         "--out", str(first_cert), "--not-before", "2020-01-01")  # fmt: skip
    manage("key_install", str(first_cert))
    kid1 = codec.key_id(signing_key.public_key())
    vendored = tmp_path / "firmware"
    tool("-m", "devices", "vendor", "--root", f"{root}.pub", "--out", str(vendored))

    # Before: a batch issued under key 1 (its batch key goes into the firmware image)
    # and three cameras activated from it, each counting usage in this hour.
    service = start_gunicorn(tmp_path, **env)
    try:
        batch = service.admin(
            "POST",
            "/v1/admin/batches",
            {"customer_id": customer.id, "sku": "VISION-PRO", "units": 5},
        )
        firmware = batch["batch_token"]
        assert codec.decode_unverified(firmware)["kid"] == kid1
        for cam in ("cam-a", "cam-b", "cam-c"):
            ran = device(vendored, tmp_path / cam, cam, service.url, "activate", "count",
                         batch_token=firmware)  # fmt: skip
            assert ran["count"] == kid1, ran
        held_b = (tmp_path / "cam-b" / "license.token").read_text().splitlines()[0]
        assert units_activated(service, batch["batch_id"]) == 3
    finally:
        stop_gunicorn(service)

    # Runbook steps 1-4: key 2 made on the server, certified offline, installed, deployed.
    second = tmp_path / "signing-key-2.pem"
    manage("keygen", "--out", str(second))
    second_cert = tmp_path / "signing-key-2.cert"
    tool("-m", "svcctl", "certify", "--root", str(root), "--key", str(second),
         "--out", str(second_cert))  # fmt: skip
    manage("key_install", str(second_cert))
    kid2 = codec.key_id(read_private_key(second).public_key())
    settings.SVC_SIGNING_KEY_FILE = second  # this host's manage.py, deployed too
    service = start_gunicorn(tmp_path, SVC_SIGNING_KEY_FILE=str(second), **env)
    try:
        assert healthz(service)["kid"] == kid2
        # Step 5, key 1 leaked: revoke it. Every worker sees it at its first request
        # after REFRESH_SECONDS (the guide's 5 s): wait that bound out.
        manage("key_revoke", kid1, reason="leaked")
        time.sleep(keyring.REFRESH_SECONDS + 0.5)
        # The cameras' hour ends (their usage is due) on both clocks.
        now = time.time()
        offset = (now // 3600 + 1) * 3600 + 60 - now
        server_clock(offset)

        # 1. The batch: a known camera re-activates with the batch key in its firmware and
        # gets its licence again, re-signed by key 2, without a second seat...
        again = device(vendored, tmp_path / "cam-a", "cam-a", service.url,
                       "activate", "start", "count", batch_token=firmware,
                       offset=offset)  # fmt: skip
        ran = (again["activate"], again["start"], again["count"])
        assert ran == ("SVC1", "active", kid2), again
        assert units_activated(service, batch["batch_id"]) == 3
        # ... and a new camera takes a seat and gets a key-2 licence (3. new activations).
        new = device(vendored, tmp_path / "cam-new", "cam-new", service.url,
                     "activate", "start", "count", batch_token=firmware,
                     offset=offset)  # fmt: skip
        assert (new["activate"], new["start"], new["count"]) == ("SVC1", "active", kid2), new
        assert units_activated(service, batch["batch_id"]) == 4

        # 2. A camera that only syncs: its usage upload under the key-1 licence is the
        # token issued, so it is stored (receipted by key 2); GET /v1/license in the same
        # sync answers the licence re-signed by key 2, installed; the next is quiet.
        synced = device(vendored, tmp_path / "cam-b", "cam-b", service.url,
                        "sync-summary", "start", "count", "sync-summary#2",
                        offset=offset)  # fmt: skip
        first, second_sync = synced["sync-summary"], synced["sync-summary#2"]
        assert first == {
            "code": "ok",
            "license": "renewed",
            "errors": [],
            "accepted": 1,
            "pending": 0,
        }, synced
        assert (synced["start"], synced["count"]) == ("active", kid2), synced
        assert second_sync == {
            "code": "ok",
            "license": "current",
            "errors": [],
            "accepted": 0,
            "pending": 0,
        }, synced
        # The key-1 token still authenticates a refresh: the re-signed licence again.
        status, body = license_refresh(service, held_b, "cam-b")
        assert status == 200 and codec.decode_unverified(body["token"])["kid"] == kid2, body
        # cam-c has not come back: it holds its key-1 licence until its next sync.

        # 4. Forged with the leaked key 1: a batch key with more units is refused and
        # recorded, and takes no seat; so is a licence with a later end.
        claims = codec.decode_unverified(firmware)
        forged = authority.encode_token(
            claims | {"batch": {**claims["batch"], "units": 5000}}, signing_key
        )
        refused = device(vendored, tmp_path / "cam-forged", "cam-forged", service.url,
                         "activate", batch_token=forged, offset=offset)  # fmt: skip
        assert refused["activate"] == "BAD_SIGNATURE", refused
        assert "not the token this authority issued" in refused["activate:detail"], refused
        assert AuditEntry.objects.filter(action=COMPROMISE_ACTION, target=claims["lic"]).exists()
        assert Event.objects.filter(
            type=Event.Type.TOKEN_COMPROMISE_SUSPECTED, data__license_id=claims["lic"]
        ).exists()
        assert units_activated(service, batch["batch_id"]) == 4
        unit = codec.decode_unverified(held_b)
        status, body = license_refresh(
            service,
            authority.encode_token(unit | {"exp": unit["exp"] + 10**6}, signing_key),
            "cam-b",
        )
        assert status == 403 and "possible signing-key compromise" in body["detail"], body
        assert AuditEntry.objects.filter(action=COMPROMISE_ACTION, target=unit["lic"]).exists()
    finally:
        stop_gunicorn(service)
