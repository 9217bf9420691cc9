"""The device module against the real service (gunicorn on the test database):
activate, start, count, sync twice, revoke, sync, restart -> Revoked, with the server's
usage totals exact."""

from __future__ import annotations

import time

import pytest

import devices
from licensing.models import Activation

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HOUR = 3600
T0 = 1_800_000_000 - 1_800_000_000 % HOUR  # an hour boundary


class SharedClock:
    """The camera's clock, which the service's follows (``server_clock``): a usage
    record lies within its licence's life and may not end in the service's future."""

    def __init__(self, now: float, server_clock) -> None:
        self._server_clock = server_clock
        self.now = now

    @property
    def now(self) -> float:
        return self._now

    @now.setter
    def now(self, value: float) -> None:
        self._now = value
        self._server_clock(value - time.time())

    def __call__(self) -> float:
        return self._now


def test_camera_lifecycle_against_the_live_service(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live_service = moved_service
    clock = SharedClock(T0 + 10, server_clock)  # the batch is issued at the camera's time
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    batch = live_service.admin(
        "POST",
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 2},
    )
    state_dir = tmp_path / "camera"

    # First boot: exchange the batch key; the batch key itself is refused by the engine.
    engine = devices.Engine(state_dir, public_key=public_key, device_id="cam-e2e", clock=clock)
    with pytest.raises(devices.ActivationRequired):
        engine.start(batch["batch_token"])
    engine.close()
    unit_token = devices.activate(
        live_service.url, batch["batch_token"], state_dir, device_id="cam-e2e", allow_http=True
    )
    # The answer carried a signed list head: the first start needs no further call.
    engine = devices.Engine(state_dir, public_key=public_key, device_id="cam-e2e", clock=clock)
    assert engine.start() == "active"
    license_id = engine.license_id
    record = Activation.objects.get(device_id="cam-e2e")
    assert record.license_id == license_id and record.sdk_version == devices.__version__
    # Re-activation on a reinstall hands back the same licence, no second seat.
    assert (
        devices.activate(
            live_service.url, batch["batch_token"], state_dir, device_id="cam-e2e", allow_http=True
        )
        == unit_token
    )
    assert (
        live_service.admin("GET", f"/v1/admin/batches/{batch['batch_id']}")["units_activated"] == 1
    )

    # Hour 1 and hour 2 of analytics; only closed periods are uploaded.
    engine.require("defect")
    engine.count(inferences=700, frames=900, stream_seconds=60, events=3)
    clock.now = T0 + HOUR + 5
    engine.count(inferences=300, frames=100, stream_seconds=40, events=1)
    first = engine.sync(live_service.url, allow_http=True)
    assert (first["accepted"], first["duplicates"]) == (1, 0)
    assert (first["conflicts"], first["refused"], first["stale"]) == (0, 0, False)
    clock.now = T0 + 2 * HOUR + 5
    engine.count(inferences=1)  # rolls hour 2 into the spool
    second = engine.sync(live_service.url, allow_http=True)
    assert (second["accepted"], second["duplicates"]) == (1, 0)
    third = engine.sync(live_service.url, allow_http=True)
    assert third["accepted"] == 0 and third["pending"] == 0

    usage = live_service.admin("GET", f"/v1/admin/usage/{license_id}")
    assert usage == {
        "license_id": license_id,
        "inferences": 1000,
        "frames": 1000,
        "stream_seconds": 100,
        "events": 4,
        "records": 2,
    }

    # Operator revokes; the camera learns it at its next sync and refuses at restart.
    live_service.admin("POST", "/v1/admin/revoke", {"license_id": license_id, "reason": "e2e"})
    clock.now = T0 + 3 * HOUR + 5
    with pytest.raises(devices.Revoked) as revoked:
        engine.sync(live_service.url, allow_http=True)  # the signed status says so
    assert revoked.value.summary["errors"] == ["UPLOAD_REFUSED"]  # the upload got 403 too
    with pytest.raises(devices.Revoked):  # analytics stop on the running engine
        engine.count(inferences=1)
    engine.close()
    assert engine.revoked_licenses() == frozenset({license_id})
    restarted = devices.Engine(state_dir, public_key=public_key, device_id="cam-e2e", clock=clock)
    with pytest.raises(devices.Revoked):
        restarted.start()
    # Nothing was double-counted by the retries.
    assert live_service.admin("GET", f"/v1/admin/usage/{license_id}")["inferences"] == 1000


def test_copied_token_is_wrong_device_and_foreign_key_is_bad_signature(
    live_service, customer, signing_key, tmp_path
):
    batch = live_service.admin(
        "POST",
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "DETECT-STD", "units": 1},
    )
    token = devices.activate(
        live_service.url, batch["batch_token"], tmp_path / "a", device_id="cam-a", allow_http=True
    )
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    copy = devices.Engine(tmp_path / "b", public_key=public_key, device_id="cam-b", air_gapped=True)
    with pytest.raises(devices.WrongDevice):
        copy.start(token)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    other_key = devices.token.public_key_b64url(Ed25519PrivateKey.generate().public_key())
    stranger = devices.Engine(
        tmp_path / "c", public_key=other_key, device_id="cam-a", air_gapped=True
    )
    with pytest.raises(devices.BadSignature):
        stranger.start(token)
    # The batch is now exhausted: a second camera gets the server's 402 detail.
    with pytest.raises(devices.LicenseError) as exhausted:
        devices.activate(
            live_service.url,
            batch["batch_token"],
            tmp_path / "d",
            device_id="cam-d",
            allow_http=True,
        )
    assert exhausted.value.code == "BATCH_EXHAUSTED"
    assert "1 of 1 units activated" in str(exhausted.value)
