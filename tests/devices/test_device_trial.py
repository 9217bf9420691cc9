"""A trial licence on the camera (issue 42 item 3): the additive ``trial`` claim needs no
rule of its own (older firmware ignores it), the term in ``exp`` with no grace stops
analytics at the trial's end exactly like any expiry (the video path runs on), and the
converted licence arrives by the refresh of an ordinary sync. A second trial of a SKU is
refused at activation with the code ``TRIAL_USED`` (the service's 409 and its ``code``);
a 409 naming no code, or one the module does not know, stays ``ACTIVATION_FAILED``.
Against the real service: tests/test_trials_end_to_end.py."""

from __future__ import annotations

import pytest

import devices
from devices import Code, Expired, LicenseError
from tests.devices.device_support import DEVICE, LICENSE, NOW

DAY = 86400
TRIAL_END = NOW + 14 * DAY


def trial_claims() -> dict:
    return {"trial": True, "grace_days": 0, "exp": TRIAL_END}


def test_a_trial_runs_to_its_end_and_stops_analytics_there_without_grace(
    make_engine, make_token, clock
):
    engine = make_engine()
    assert engine.start(make_token(**trial_claims())) == "active"
    assert engine.claims["trial"] is True  # kept, not refused: an additive claim
    clock.now = TRIAL_END - 60
    engine.require("detect")
    engine.count(inferences=7)

    clock.now = TRIAL_END + 1
    with pytest.raises(Expired) as stopped:
        engine.require("detect")
    assert stopped.value.code == Code.LICENSE_EXPIRED
    with pytest.raises(Expired):
        engine.count(inferences=1)
    with engine.open_stream() as stream:  # the video path keeps running
        assert engine.admit_frame(stream)
    assert engine.state != "SVC_LIC_GRACE"


def test_an_expired_trial_refuses_to_start(make_engine, make_token, clock):
    clock.now = TRIAL_END + DAY
    with pytest.raises(Expired):
        make_engine().start(make_token(**trial_claims()))


def test_the_converted_license_arrives_at_the_next_sync(make_engine, make_token, service, clock):
    engine = make_engine()
    engine.start(make_token(**trial_claims()))
    clock.now = TRIAL_END + 3 * DAY  # the trial has ended; then the customer buys
    with pytest.raises(Expired):
        engine.require("detect")
    paid = make_token(exp=NOW + 400 * DAY, grace_days=30, iat=NOW + 17 * DAY)
    service.reply(
        "GET",
        "/v1/license",
        200,
        {"license_id": LICENSE, "token": paid, "expires_at": NOW + 400 * DAY, "certificates": []},
    )

    assert engine.sync(service.url, allow_http=True)["license"] == "renewed"

    assert "trial" not in engine.claims and engine.state == "active"
    engine.require("detect")
    engine.count(inferences=1)


def test_a_second_trial_is_refused_with_its_code(service, tmp_path):
    service.reply(
        "POST",
        "/v1/activate",
        409,
        {"detail": "device cam already had its trial of VISION-PRO", "code": "TRIAL_USED"},
    )
    with pytest.raises(LicenseError, match="already had its trial") as caught:
        devices.activate(service.url, "B", tmp_path / "state", device_id=DEVICE, allow_http=True)
    assert caught.value.code == Code.TRIAL_USED == "TRIAL_USED"
    assert not (tmp_path / "state" / "license.token").exists()


@pytest.mark.parametrize(
    "code", [None, "SOMETHING_NEW", ["TRIAL_USED"], {"TRIAL_USED": 1}, 409, "trial_used"]
)
def test_a_conflict_naming_no_known_code_stays_activation_failed(service, tmp_path, code):
    body = {"detail": "refused"} | ({} if code is None else {"code": code})
    service.reply("POST", "/v1/activate", 409, body)
    with pytest.raises(LicenseError) as caught:
        devices.activate(service.url, "B", tmp_path / "state", device_id=DEVICE, allow_http=True)
    assert caught.value.code == Code.ACTIVATION_FAILED


def test_only_a_conflict_carries_the_trial_code(service, tmp_path):
    """A 403 naming TRIAL_USED is still a refused key (BadSignature): the code is read
    only where the service sends it."""
    service.reply("POST", "/v1/activate", 403, {"detail": "no", "code": "TRIAL_USED"})
    with pytest.raises(devices.BadSignature):
        devices.activate(service.url, "B", tmp_path / "state", device_id=DEVICE, allow_http=True)
