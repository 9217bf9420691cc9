"""Check-in leases and suspension on the device (issue 42): the newest verified status's
``lease_end`` bounds how long analytics run without a sync (the high-water mark, not the
clock, decides), and ``suspended`` refuses analytics until a newer status lifts it. The
video path keeps running through both; statuses without the fields behave as before."""

from __future__ import annotations

import pytest

import devices
from devices import documents
from devices.errors import Code

from .device_support import DEVICE, LICENSE, NOW, signed_status

DAY = 86400
PERPETUAL = {"exp": 0}


def _video_runs(engine: devices.Engine) -> None:
    with engine.open_stream() as stream:
        assert engine.admit_frame(stream) is True


@pytest.fixture
def perpetual(make_token, state_dir) -> str:
    text = make_token(**PERPETUAL)
    (state_dir / "license.token").write_text(text + "\n")
    return text


def _sync_at(engine, service, clock, moment: float) -> dict:
    clock.now = service.now = moment
    return engine.sync(service.url, allow_http=True)


def test_lease_of_seven_days_refuses_from_day_eight_and_one_sync_restores(
    make_engine, perpetual, clock, service
):
    service.lease_seconds = 7 * DAY
    engine = make_engine()
    assert engine.start(perpetual) == "active"
    _sync_at(engine, service, clock, NOW)  # the status now carries lease_end = NOW + 7 days
    engine.require("detect")
    for day in (1, 7):
        clock.now = NOW + day * DAY - 1
        engine.require("detect")
        engine.count(inferences=1)
    for day in (8, 30, 90, 180, 300):
        clock.now = NOW + day * DAY
        with pytest.raises(devices.LeaseExpired) as refused:
            engine.require("detect")
        assert refused.value.code == Code.LEASE_EXPIRED
        with pytest.raises(devices.LeaseExpired):
            engine.count(inferences=1)
        _video_runs(engine)
    # A restart far offline: the licence installs (video runs), analytics refuse.
    restarted = make_engine()
    with pytest.raises(devices.LeaseExpired):
        restarted.start()
    _video_runs(restarted)
    # Clock rollback: the high-water mark (day 300) is past the lease end.
    clock.now = NOW + 3 * DAY
    with pytest.raises(devices.LeaseExpired):
        restarted.require("detect")
    again = make_engine()
    with pytest.raises(devices.ClockRollback):
        again.start()
    # One successful sync at day 300 restores analytics for another seven days.
    clock.now = NOW + 300 * DAY
    again = make_engine()
    with pytest.raises(devices.LeaseExpired):
        again.start()
    assert _sync_at(again, service, clock, NOW + 300 * DAY)["lease_end"] == NOW + 307 * DAY
    again.require("detect")
    again.count(inferences=1)
    clock.now = NOW + 307 * DAY + 1
    with pytest.raises(devices.LeaseExpired):
        again.require("detect")


def test_lease_survives_reboot_and_a_replayed_older_status(
    make_engine, perpetual, clock, service, signing_key, state_dir
):
    service.lease_seconds = 7 * DAY
    engine = make_engine()
    engine.start(perpetual)
    _sync_at(engine, service, clock, NOW + 10)
    clock.now = NOW + 8 * DAY
    with pytest.raises(devices.LeaseExpired):
        engine.require("detect")
    # A service answering with an older status (a replay) changes nothing.
    older = signed_status(signing_key, issued_at=NOW - 60, lease_end=NOW + 400 * DAY)
    service.reply("GET", "/v1/revocations/status", 200, {"status": older})
    summary = engine.sync(service.url, allow_http=True)
    assert summary["stale"] is True
    with pytest.raises(devices.LeaseExpired):
        engine.require("detect")


def test_status_without_lease_runs_offline_as_before(make_engine, perpetual, clock, service):
    engine = make_engine()
    assert engine.start(perpetual) == "active"
    _sync_at(engine, service, clock, NOW)
    for day in (0, 7, 30, 90, 180, 300):
        clock.now = NOW + day * DAY
        engine.require("detect")
        engine.count(inferences=1)
    assert make_engine().start() == "active"


def test_suspended_status_refuses_analytics_until_reinstated(
    make_engine, perpetual, clock, service
):
    engine = make_engine()
    engine.start(perpetual)
    service.suspended = True
    with pytest.raises(devices.Suspended) as suspended:
        _sync_at(engine, service, clock, NOW + 60)
    assert suspended.value.code == Code.SUSPENDED
    with pytest.raises(devices.Suspended):
        engine.require("detect")
    with pytest.raises(devices.Suspended):
        engine.count(inferences=1)
    _video_runs(engine)
    restarted = make_engine()
    with pytest.raises(devices.Suspended):
        restarted.start()
    _video_runs(restarted)
    assert restarted.revoked_licenses() == frozenset()  # a hold is not a revocation
    service.suspended = False
    _sync_at(restarted, service, clock, NOW + 120)
    restarted.require("detect")
    restarted.count(inferences=1)


def test_status_fields_are_checked_and_optional(signing_key):
    public = signing_key.public_key()
    plain = documents.parse_status(signed_status(signing_key), public)
    assert (plain.lease_end, plain.suspended) == (0, False)
    both = documents.parse_status(
        signed_status(signing_key, lease_end=NOW + DAY, suspended=True), public
    )
    assert (both.lease_end, both.suspended) == (NOW + DAY, True)
    from svccore import authority

    for bad in ({"lease_end": -1}, {"lease_end": "1"}, {"suspended": 1}):
        payload = authority.status_payload(
            issuer="svc-test", license_id=LICENSE, device_id=DEVICE, revoked_at=0, seq=0,
            issued_at=NOW,
        ) | bad  # fmt: skip
        text = authority.sign_document(documents.STATUS_PREFIX, payload, signing_key)
        with pytest.raises(devices.LicenseError) as refused:
            documents.parse_status(text, public)
        assert refused.value.code == Code.BAD_RESPONSE
