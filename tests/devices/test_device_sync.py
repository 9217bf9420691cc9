"""Usage spool, Engine.sync and devices.activate against a stand-in service (stdlib HTTP
server on 127.0.0.1:0): contract §7, spec §4.2, the revocation list of §2.6 as the
signed status of the licence held."""

from __future__ import annotations

import json

import pytest

import devices
from devices import BadSignature, Engine, LicenseError, Revoked
from devices import engine as engine_module
from tests.devices.device_support import DEVICE, LICENSE, NOW, signed_status

HOUR = 3600
PERIOD = NOW // HOUR * HOUR  # the period containing NOW


@pytest.fixture
def running(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token())
    return engine


def test_only_closed_periods_are_spooled(running, clock):
    running.count(inferences=5, frames=10)
    assert running.pending_records == []
    clock.now = PERIOD + HOUR + 1
    running.count(inferences=1)
    assert running.pending_records == [
        {
            "period_start": PERIOD,
            "period_end": PERIOD + HOUR,
            "inferences": 5,
            "frames": 10,
            "stream_seconds": 0,
            "events": 0,
        }
    ]
    assert running.usage["period_start"] == PERIOD + HOUR


def test_idle_periods_are_not_spooled(running, clock):
    running.count(frames=1)
    clock.now = PERIOD + 5 * HOUR
    running.count(frames=1)
    assert [r["period_start"] for r in running.pending_records] == [PERIOD]


def test_open_period_survives_reboot_and_is_closed_later(make_engine, make_token, clock, running):
    running.count(inferences=3)
    running.close()
    clock.now = PERIOD + 2 * HOUR
    rebooted = make_engine()
    rebooted.start(make_token())
    assert [(r["period_start"], r["inferences"]) for r in rebooted.pending_records] == [(PERIOD, 3)]


def test_sync_uploads_closed_periods_with_unit_token(running, clock, service, make_token):
    service.on("POST", "/v1/usage", service.accept)
    running.count(inferences=5, frames=10, stream_seconds=2, events=1)
    clock.now = PERIOD + HOUR
    summary = running.sync(service.url, allow_http=True)
    assert summary == {
        "accepted": 1,
        "duplicates": 0,
        "conflicts": 0,
        "refused": 0,
        "deferred": 0,
        "stale": False,
        "pending": 0,
        "set_aside": 0,
        "revoked": False,
        "list_seq": 0,
        "license": "current",
        "errors": [],
    }
    (upload,) = service.calls("/v1/usage")
    assert upload["headers"]["Authorization"] == f"Bearer {make_token()}"
    assert len(upload["json"].pop("nonce")) >= 16  # binds the receipt to this upload
    assert upload["json"] == {
        "device_id": DEVICE,
        "license_id": "LIC-0123456789",
        "records": [
            {
                "period_start": PERIOD,
                "period_end": PERIOD + HOUR,
                "inferences": 5,
                "frames": 10,
                "stream_seconds": 2,
                "events": 1,
            }
        ],
    }
    assert running.pending_records == []


def test_sync_with_empty_spool_only_fetches_the_status(running, service, state_dir):
    service.revoked = [("LIC-X", 0)]
    assert running.sync(service.url, allow_http=True)["pending"] == 0
    assert service.calls("/v1/usage") == [] and service.calls("/v1/revocations") == []
    (asked,) = service.calls("/v1/revocations/status")
    assert asked["query"] == {"license_id": [LICENSE], "device_id": [DEVICE]}
    held = json.loads((state_dir / "status.json").read_text())["statuses"]
    # One signed status of the licence this device runs: the list's size never reaches it.
    assert (
        len(held) == 1
        and devices.documents.parse_status(held[0], service.key.public_key()).seq == 1
    )
    assert running.sync(service.url, allow_http=True)["list_seq"] == 1


def test_sync_failure_keeps_records_for_next_time(running, clock, service):
    running.count(inferences=1)
    clock.now = PERIOD + HOUR
    service.reply("POST", "/v1/usage", 503, {"detail": "maintenance"})
    with pytest.raises(LicenseError, match="maintenance") as caught:
        running.sync(service.url, allow_http=True)
    assert caught.value.code == "SYNC_FAILED"
    assert len(running.pending_records) == 1
    service.on("POST", "/v1/usage", service.accept)
    assert running.sync(service.url, allow_http=True)["accepted"] == 1
    assert running.pending_records == []


def test_records_survive_reboot_until_acknowledged(
    running, clock, service, make_engine, make_token
):
    running.count(inferences=1)
    clock.now = PERIOD + HOUR
    running.count(frames=1)  # closes the first period
    rebooted = make_engine()
    rebooted.start(make_token())
    service.on("POST", "/v1/usage", service.accept)
    rebooted.sync(service.url, allow_http=True)
    (upload,) = service.calls("/v1/usage")
    assert upload["json"]["records"][0]["period_start"] == PERIOD


def test_sync_sends_at_most_1000_records_and_resends_deferred(
    make_engine, make_token, state_dir, service
):
    # 1005 closed hours spooled by an earlier boot (written directly: faster than metering)
    records = [
        {"period_start": PERIOD - h * HOUR, "period_end": PERIOD - h * HOUR + HOUR}
        | {"inferences": 1, "frames": 0, "stream_seconds": 0, "events": 0}
        for h in range(1005, 0, -1)
    ]
    (state_dir / "spool.json").write_text(json.dumps({"format": 1, "records": records}))
    running = make_engine()
    running.start(make_token())
    assert len(running.pending_records) == 1005

    def accept_all_but_last_ten(request):
        sent = request["json"]["records"][:-10]
        return 200, {
            "accepted": len(sent),
            "duplicates": 0,
            "deferred": 10,
            "receipt": service.receipt(
                request, [(r["period_start"], r["period_end"]) for r in sent]
            ),
        }

    service.on("POST", "/v1/usage", accept_all_but_last_ten)
    summary = running.sync(service.url, allow_http=True)
    assert len(service.calls("/v1/usage")[0]["json"]["records"]) == 1000
    assert summary["deferred"] == 10 and summary["pending"] == 15
    service.on("POST", "/v1/usage", service.accept)
    running.sync(service.url, allow_http=True)
    second = service.calls("/v1/usage")[1]["json"]["records"]
    assert second == records[990:]
    assert running.pending_records == []


def test_resent_period_keeps_its_boundaries(running, clock, service):
    running.count(inferences=2)
    clock.now = PERIOD + HOUR + 10
    service.reply("POST", "/v1/usage", 500, {"detail": "boom"})
    with pytest.raises(LicenseError):
        running.sync(service.url, allow_http=True)
    clock.now = PERIOD + 3 * HOUR
    running.count(inferences=1)
    service.on("POST", "/v1/usage", service.accept)
    running.sync(service.url, allow_http=True)
    first, second = (c["json"]["records"] for c in service.calls("/v1/usage"))
    assert first[0] == second[0]


def test_usage_upload_refused_keeps_records_and_revokes_nothing(running, clock, service):
    """A 403 is not signed: only the status decides. Records stay for the next sync."""
    running.count(inferences=1)
    clock.now = PERIOD + HOUR
    service.reply("POST", "/v1/usage", 403, {"detail": "licence LIC-0123456789 is revoked"})
    with pytest.raises(LicenseError, match="is revoked") as caught:
        running.sync(service.url, allow_http=True)
    assert caught.value.code == "UPLOAD_REFUSED" and not isinstance(caught.value, Revoked)
    assert len(running.pending_records) == 1
    running.require("detect")
    service.revoked = [(LICENSE, 0)]  # the signed status says so: now it is a revocation
    with pytest.raises(Revoked) as caught:
        running.sync(service.url, allow_http=True)
    assert caught.value.summary["errors"] == ["UPLOAD_REFUSED"]
    assert len(running.pending_records) == 1


def test_usage_upload_rejected_token_is_bad_signature(running, clock, service):
    running.count(inferences=1)
    clock.now = PERIOD + HOUR
    service.reply("POST", "/v1/usage", 401, {"detail": "token does not verify"})
    with pytest.raises(BadSignature, match="does not verify"):
        running.sync(service.url, allow_http=True)
    assert len(running.pending_records) == 1


def test_revocation_fetched_by_sync_stops_analytics_and_refuses_next_start(
    running, service, make_engine, make_token
):
    service.revoked = [("LIC-OTHER", 0), (LICENSE, NOW + 86400)]
    with pytest.raises(Revoked) as caught:
        running.sync(service.url, allow_http=True)
    assert caught.value.summary["revoked"] is True and caught.value.summary["list_seq"] == 2
    with pytest.raises(Revoked):  # at once, beyond the spec's "at next start" (§3)
        running.count(frames=1)
    with running.open_stream() as stream:
        assert running.admit_frame(stream)
    with pytest.raises(Revoked):
        make_engine().start(make_token())


def test_older_status_never_replaces_newer(running, service, state_dir):
    service.revoked = [("LIC-A", 0), (LICENSE, 0)]
    with pytest.raises(Revoked):
        running.sync(service.url, allow_http=True)
    held = (state_dir / "status.json").read_text()
    replay = {"status": signed_status(service.key, seq=1, issued_at=NOW - 3600)}
    service.reply("GET", "/v1/revocations/status", 200, replay)
    with pytest.raises(Revoked) as caught:
        running.sync(service.url, allow_http=True)
    # Older than the one held: kept as it was, reported as stale, never an error.
    assert caught.value.summary["errors"] == [] and caught.value.summary["stale"] is True
    assert (state_dir / "status.json").read_text() == held


def test_sync_without_network_is_a_clear_error(running, clock):
    running.count(inferences=1)
    clock.now = PERIOD + HOUR
    with pytest.raises(LicenseError, match="cannot reach") as caught:
        running.sync("http://127.0.0.1:9", timeout=2, allow_http=True)
    assert caught.value.code == "NETWORK_ERROR"
    assert len(running.pending_records) == 1


def test_activate_posts_device_identity_and_stores_unit_token(service, make_token, tmp_path):
    unit = make_token()
    service.reply(
        "POST",
        "/v1/activate",
        200,
        {"unit_token": unit, "license_id": "LIC-0123456789", "reactivated": False},
    )
    state = tmp_path / "fresh"
    token = devices.activate(service.url, "BATCH-TOKEN\n", state, device_id=DEVICE, allow_http=True)
    assert token == unit
    assert (state / "license.token").read_text().strip() == unit
    (call,) = service.calls("/v1/activate")
    assert call["json"] == {
        "batch_token": "BATCH-TOKEN",
        "device_id": DEVICE,
        "fingerprint_source": "explicit",
        "weak_binding": False,
        "sdk_version": devices.__version__,
    }


def test_activate_reports_fingerprint_source_and_weakness(
    service, make_token, tmp_path, monkeypatch
):
    monkeypatch.setenv("SVC_DEVICE_ID", DEVICE)
    service.reply("POST", "/v1/activate", 200, {"unit_token": make_token()})
    devices.activate(service.url, "B", tmp_path, allow_http=True)
    (call,) = service.calls("/v1/activate")
    assert (call["json"]["fingerprint_source"], call["json"]["weak_binding"]) == ("env", False)


def test_activated_token_starts_the_engine(service, make_token, tmp_path, public_key, clock):
    status = service.status_document(LICENSE, DEVICE)
    answer = {"unit_token": make_token(), "reactivated": False, "status": status}
    service.reply("POST", "/v1/activate", 200, answer)
    devices.activate(service.url, "B", tmp_path, device_id=DEVICE, allow_http=True)
    engine = Engine(tmp_path, public_key=public_key, device_id=DEVICE, clock=clock)
    assert engine.start() == "active"
    engine.close()


def test_activation_answer_without_a_status_waits_for_a_sync(
    service, make_token, tmp_path, public_key, clock
):
    service.reply("POST", "/v1/activate", 200, {"unit_token": make_token(), "reactivated": False})
    devices.activate(service.url, "B", tmp_path, device_id=DEVICE, allow_http=True)
    engine = Engine(tmp_path, public_key=public_key, device_id=DEVICE, clock=clock)
    with pytest.raises(devices.SyncRequired, match="no signed status"):
        engine.start()
    engine.sync(service.url, allow_http=True)
    assert engine.start() == "active"
    engine.close()


def test_reactivated_license_without_state_waits_for_a_sync(
    service, make_token, tmp_path, public_key, clock
):
    status = service.status_document(LICENSE, DEVICE)
    answer = {"unit_token": make_token(), "reactivated": True, "status": status}
    service.reply("POST", "/v1/activate", 200, answer)
    devices.activate(service.url, "B", tmp_path, device_id=DEVICE, allow_http=True)
    engine = Engine(tmp_path, public_key=public_key, device_id=DEVICE, clock=clock)
    with pytest.raises(devices.SyncRequired, match="no state file"):
        engine.start()
    service.usage_total = 7_000  # what the authority has stored for this licence
    engine.sync(service.url, allow_http=True)
    engine.require("detect")
    assert engine.quota_used == 7_000
    engine.close()


def test_activate_exhausted_batch_is_402_with_detail(service, tmp_path):
    service.reply("POST", "/v1/activate", 402, {"detail": "batch B-2026-X exhausted: 10/10"})
    with pytest.raises(LicenseError, match="B-2026-X exhausted: 10/10") as caught:
        devices.activate(service.url, "B", tmp_path, device_id=DEVICE, allow_http=True)
    assert caught.value.code == "BATCH_EXHAUSTED"
    assert not (tmp_path / "license.token").exists()


def test_activate_refused_key_is_403_bad_signature(service, tmp_path):
    service.reply("POST", "/v1/activate", 403, {"detail": "batch key not issued here"})
    with pytest.raises(BadSignature, match="not issued here"):
        devices.activate(service.url, "B", tmp_path, device_id=DEVICE, allow_http=True)


def test_activate_answer_for_another_device_is_refused(service, make_token, tmp_path):
    service.reply("POST", "/v1/activate", 200, {"unit_token": make_token(dev="cam-9")})
    with pytest.raises(LicenseError, match="another device"):
        devices.activate(service.url, "B", tmp_path, device_id=DEVICE, allow_http=True)


def test_activate_without_network_is_a_clear_error(tmp_path):
    with pytest.raises(LicenseError, match="cannot reach") as caught:
        devices.activate(
            "http://127.0.0.1:9", "B", tmp_path, device_id=DEVICE, timeout=2, allow_http=True
        )
    assert caught.value.code == "NETWORK_ERROR"


def test_period_closed_before_crash_is_not_double_counted(
    make_engine, make_token, clock, state_dir
):
    engine = make_engine()
    engine.start(make_token())
    engine.count(inferences=4)
    stale_state = (state_dir / "state.json").read_bytes()  # the period still open
    clock.now = PERIOD + HOUR
    engine.count(frames=1)  # spool written, then state
    (state_dir / "state.json").write_bytes(stale_state)  # as if the crash hit in between
    rebooted = make_engine()
    rebooted.start(make_token())
    assert [(r["period_start"], r["inferences"]) for r in rebooted.pending_records] == [(PERIOD, 4)]
    assert rebooted.usage["period_start"] == PERIOD + HOUR


def test_period_length_is_a_module_constant():
    assert engine_module.PERIOD_SECONDS == HOUR
