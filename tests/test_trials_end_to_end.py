"""Trials end to end (issue 42 item 3): a vendored device module against a real gunicorn
whose clock moves with the camera's (``moved_service``).

A trial batch of 14 days: the camera activated on day 2 runs analytics to its own day 16
(not the batch's end), stops them there like any expiry (video runs on), and the same
camera trying the trial of another batch of the SKU is refused with ``TRIAL_USED``. The
batch converted on day 20: the camera's next sync installs the paid licence (no
re-activation) and analytics run again to the paid end; usage of the trial and of the
paid time is accepted all along; the conversion is billed once."""

from __future__ import annotations

import pytest

import devices
from devices.token import decode_unverified
from licensing.models import Activation
from tests.test_end_to_end import T0, SharedClock

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DAY = 86400


def _video_runs(engine: devices.Engine) -> None:
    with engine.open_stream() as stream:
        assert engine.admit_frame(stream)


def test_a_trial_camera_stops_at_its_own_end_and_runs_again_once_converted(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live = moved_service
    clock = SharedClock(T0 + 10, server_clock)
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    batch = live.admin(
        "POST",
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 5, "trial_days": 14},
    )
    other = live.admin(
        "POST",
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 5, "trial_days": 30},
    )
    assert batch["trial_days"] == 14
    clock.now = T0 + 2 * DAY  # activated two days after the batch was issued
    state_dir = tmp_path / "camera"
    token = devices.activate(
        live.url, batch["batch_token"], state_dir, device_id="cam-trial", allow_http=True
    )
    claims = decode_unverified(token)
    assert claims["trial"] is True and claims["grace_days"] == 0
    assert claims["exp"] == T0 + 16 * DAY

    camera = devices.Engine(state_dir, public_key=public_key, device_id="cam-trial", clock=clock)
    assert camera.start() == "active"
    for day in (2, 9, 15):
        clock.now = T0 + day * DAY + 3600
        camera.require("detect")
        camera.count(inferences=10)
    assert camera.sync(live.url, allow_http=True)["accepted"] >= 1

    # Past its own end (the batch runs a year): analytics stop, with no grace; video runs.
    clock.now = T0 + 16 * DAY + 1
    with pytest.raises(devices.Expired) as stopped:
        camera.require("detect")
    assert stopped.value.code == "LICENSE_EXPIRED"
    with pytest.raises(devices.Expired):
        camera.count(inferences=1)
    _video_runs(camera)

    # The same camera on another trial of the SKU: refused, coded, no seat taken.
    with pytest.raises(devices.LicenseError) as refused:
        devices.activate(
            live.url, other["batch_token"], tmp_path / "again", device_id="cam-trial",
            allow_http=True,
        )  # fmt: skip
    assert refused.value.code == "TRIAL_USED"
    assert live.admin("GET", f"/v1/admin/batches/{other['batch_id']}")["units_activated"] == 0

    # Converted on day 20: the next sync installs the paid licence, nothing re-activated.
    clock.now = T0 + 20 * DAY
    conversion = live.admin("POST", f"/v1/admin/batches/{batch['batch_id']}/convert", {})
    assert (conversion["units"], conversion["amount"]) == (1, 240)
    assert conversion["expires_at"] == T0 + 20 * DAY + 365 * DAY
    summary = camera.sync(live.url, allow_http=True)
    assert summary["license"] == "renewed"
    assert camera.state == "active" and "trial" not in camera.claims
    assert camera.claims["exp"] == conversion["expires_at"] and camera.claims["grace_days"] == 30
    camera.require("detect")
    camera.count(inferences=5)
    clock.now = T0 + 300 * DAY
    camera.require("detect")
    assert camera.sync(live.url, allow_http=True)["license"] == "current"
    camera.close()
    assert Activation.objects.filter(device_id="cam-trial").count() == 1  # never re-activated
    status = live.admin("GET", f"/v1/admin/batches/{batch['batch_id']}")
    assert (status["trial_days"], status["trial_converted_at"]) == (None, T0 + 20 * DAY)
    again = live.admin("POST", f"/v1/admin/batches/{batch['batch_id']}/convert", {})
    assert again["replayed"] is True and again["converted_at"] == conversion["converted_at"]
