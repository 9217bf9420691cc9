"""Check-in leases and suspension end to end (issue 42): a vendored device module
against a real gunicorn whose clock moves with the camera's (``moved_service``).

A batch sold with a seven-day lease: the camera kept offline refuses analytics from day
8 (checked at 0, 7, 8, 30, 90, 180 and 300), keeps its video path, is not fooled by its
clock set back, and one sync restores it. A suspended batch key stops its units'
analytics at the sync that learns it, reinstating restores them at the next."""

from __future__ import annotations

import json

import pytest

import devices
from audit.models import AuditEntry
from devices import documents
from licensing.models import License
from tests.test_end_to_end import HOUR, T0, SharedClock

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DAY = 86400


def _video_runs(engine: devices.Engine) -> None:
    with engine.open_stream() as stream:
        assert engine.admit_frame(stream)


def test_offline_camera_with_a_seven_day_lease_from_day_0_to_300(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live = moved_service
    clock = SharedClock(T0 + 10, server_clock)
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    batch = live.admin(
        "POST",
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 2, "max_offline_days": 7},
    )
    assert batch["max_offline_days"] == 7
    state_dir = tmp_path / "camera"
    devices.activate(
        live.url, batch["batch_token"], state_dir, device_id="cam-lease", allow_http=True
    )

    def engine() -> devices.Engine:
        return devices.Engine(state_dir, public_key=public_key, device_id="cam-lease", clock=clock)

    camera = engine()
    assert camera.start() == "active"
    lic = License.objects.get(device_id="cam-lease")
    assert lic.checked_in_at is not None  # the activation handed out the first lease
    fleet = live.admin("GET", "/v1/admin/fleet")["units"]
    unit = next(u for u in fleet if u["device_id"] == "cam-lease")
    assert unit["lease_end"] == int(lic.checked_in_at.timestamp()) + 7 * DAY

    for day in (0, 7):
        clock.now = T0 + day * DAY
        camera.require("detect")
        camera.count(inferences=1)
    for day in (8, 30, 90, 180, 300):
        clock.now = T0 + day * DAY + 10
        with pytest.raises(devices.LeaseExpired) as refused:
            camera.require("detect")
        assert refused.value.code == "LEASE_EXPIRED"
        with pytest.raises(devices.LeaseExpired):
            camera.count(inferences=1)
        _video_runs(camera)
    camera.close()

    # Rollback attempts at day 300: restarting with the clock at day 3 is refused, and a
    # running engine whose clock is set back is refused too (the high-water mark).
    clock.now = T0 + 3 * DAY
    rolled_back = engine()
    with pytest.raises(devices.ClockRollback):
        rolled_back.start()
    rolled_back.close()
    clock.now = T0 + 300 * DAY + 20
    camera = engine()
    with pytest.raises(devices.LeaseExpired):
        camera.start()
    _video_runs(camera)
    clock.now = T0 + 3 * DAY
    with pytest.raises(devices.LeaseExpired):
        camera.require("detect")

    # One sync (at day 300, by both clocks) restores analytics for seven more days.
    clock.now = T0 + 300 * DAY + 30
    summary = camera.sync(live.url, allow_http=True)
    assert summary["lease_end"] == T0 + 307 * DAY + 30
    camera.require("detect")
    camera.count(inferences=5)
    lic.refresh_from_db()
    assert int(lic.checked_in_at.timestamp()) == T0 + 300 * DAY + 30
    clock.now = T0 + 307 * DAY + 31
    with pytest.raises(devices.LeaseExpired):
        camera.require("detect")
    camera.close()


def test_unit_without_a_lease_runs_offline_as_today(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live = moved_service
    clock = SharedClock(T0 + 10, server_clock)
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    batch = live.admin(
        "POST", "/v1/admin/batches", {"customer_id": customer.id, "sku": "VISION-PRO", "units": 1}
    )
    state_dir = tmp_path / "camera"
    devices.activate(
        live.url, batch["batch_token"], state_dir, device_id="cam-free", allow_http=True
    )
    held = json.loads((state_dir / "status.json").read_text())["statuses"]
    status = documents.parse_status(held[0], signing_key.public_key())
    assert (status.lease_end, status.suspended) == (0, False)
    assert "lease_end" not in held[0] and "suspended" not in held[0]  # signed as before
    camera = devices.Engine(state_dir, public_key=public_key, device_id="cam-free", clock=clock)
    assert camera.start() == "active"
    for day in (0, 7, 30, 90, 180, 300):
        clock.now = T0 + day * DAY
        camera.require("detect")
    camera.close()


def test_suspend_and_reinstate_a_batch_through_the_live_service(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live = moved_service
    clock = SharedClock(T0 + 10, server_clock)
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    batch = live.admin(
        "POST", "/v1/admin/batches", {"customer_id": customer.id, "sku": "VISION-PRO", "units": 3}
    )
    state_dir = tmp_path / "camera"
    devices.activate(
        live.url, batch["batch_token"], state_dir, device_id="cam-held", allow_http=True
    )
    camera = devices.Engine(state_dir, public_key=public_key, device_id="cam-held", clock=clock)
    assert camera.start() == "active"
    camera.count(inferences=10)

    held = live.admin(
        "POST", "/v1/admin/suspend", {"batch_id": batch["batch_id"], "reason": "invoice unpaid"}
    )
    assert (held["scope"], held["suspended"], held["changed"]) == ("batch", True, True)
    camera.require("detect")  # offline, the camera has not learned it yet
    clock.now = T0 + HOUR + 20
    with pytest.raises(devices.Suspended) as learned:
        camera.sync(live.url, allow_http=True)
    assert learned.value.code == "SUSPENDED" and learned.value.summary["suspended"] is True
    assert learned.value.summary["accepted"] == 1  # the usage counted before still uploads
    with pytest.raises(devices.Suspended):
        camera.count(inferences=1)
    _video_runs(camera)
    unit = next(
        u for u in live.admin("GET", "/v1/admin/fleet")["units"] if u["device_id"] == "cam-held"
    )
    assert unit["suspended"] == 1 and unit["revoked"] == 0
    status = live.admin("GET", f"/v1/admin/batches/{batch['batch_id']}")
    assert status["units_activated"] == 1  # the suspended unit keeps its seat

    again = live.admin(
        "POST", "/v1/admin/reinstate", {"batch_id": batch["batch_id"], "reason": "paid"}
    )
    assert (again["suspended"], again["changed"]) == (False, True)
    clock.now = T0 + HOUR + 40
    summary = camera.sync(live.url, allow_http=True)
    assert "suspended" not in summary
    camera.require("detect")
    camera.count(inferences=1)
    camera.close()

    types = [
        e["type"]
        for e in live.admin("GET", f"/v1/admin/events?customer_id={customer.id}")["events"]
    ]
    assert "license.suspended" in types and "license.reinstated" in types
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"license.suspend", "license.reinstate"} <= actions
