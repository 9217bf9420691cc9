"""The engine applying a unit token on the device: spec §1 outcomes, §3 states, §8 limits."""

from __future__ import annotations

import json
import logging
import socket

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import devices
from devices import (
    ActivationRequired,
    BadSignature,
    ClockRollback,
    Engine,
    Expired,
    LicenseError,
    NotEntitled,
    QuotaExceeded,
    Revoked,
    StreamLimit,
    SyncRequired,
    WrongDevice,
)
from devices import engine as engine_module
from tests.devices.device_support import DEVICE, NOW, signed_status

DAY = 86400


def test_valid_unit_token_starts_active(make_engine, make_token):
    engine = make_engine()
    assert engine.start(make_token()) == "active"
    assert engine.state == "active"
    assert engine.license_id == "LIC-0123456789"


def test_altered_token_is_refused_at_start(make_engine, make_token):
    token = make_token()
    with pytest.raises(BadSignature):
        make_engine().start(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1])


def test_token_signed_with_another_key_is_refused(make_engine, make_token):
    with pytest.raises(BadSignature):
        make_engine().start(make_token(key=Ed25519PrivateKey.generate()))


def test_token_copied_to_another_device_is_wrong_device(make_engine, make_token):
    with pytest.raises(WrongDevice) as caught:
        make_engine(device_id="cam-0002").start(make_token())
    assert caught.value.code == "WRONG_DEVICE"


def test_batch_key_presented_directly_requires_activation(make_engine, make_token):
    batch_key = make_token(dev="*", act="required", batch={"id": "B-2026-X", "units": 10})
    with pytest.raises(ActivationRequired) as caught:
        make_engine().start(batch_key)
    assert caught.value.code == "ACTIVATION_REQUIRED"


def test_bound_token_with_activation_required_is_refused(make_engine, make_token):
    with pytest.raises(ActivationRequired):
        make_engine().start(make_token(act="required"))


def test_clock_set_back_behind_high_water_mark_is_rollback(make_engine, make_token, clock):
    make_engine().start(make_token())
    clock.advance(-3600)
    with pytest.raises(ClockRollback) as caught:
        make_engine().start(make_token())
    assert caught.value.code == "LICENSE_CLOCK_ROLLBACK"


def test_high_water_mark_follows_the_running_clock(make_engine, make_token, clock):
    engine = make_engine()
    engine.start(make_token())
    clock.advance(5000.5)
    engine.count(frames=1)  # checkpoints the new high-water mark
    clock.advance(-310)  # past the 300 s leeway
    with pytest.raises(ClockRollback):
        make_engine().start(make_token())
    clock.advance(20)  # a step back inside the leeway (NTP, RTC drift) is tolerated
    assert make_engine().start(make_token()) == "active"


def test_inside_grace_starts_with_warning(make_engine, make_token, clock, caplog):
    clock.now = NOW + 30 * DAY + 1
    with caplog.at_level(logging.WARNING, logger="devices"):
        assert make_engine().start(make_token()) == "SVC_LIC_GRACE"
    assert "SVC_LIC_GRACE" in caplog.text and "LIC-0123456789" in caplog.text


def test_grace_still_runs_analytics(make_engine, make_token, clock):
    clock.now = NOW + 30 * DAY + 13 * DAY
    engine = make_engine()
    assert engine.start(make_token()) == "SVC_LIC_GRACE"
    engine.require("detect")
    engine.count(inferences=1)


def test_past_term_and_grace_is_expired(make_engine, make_token, clock):
    clock.now = NOW + 30 * DAY + 14 * DAY + 1
    with pytest.raises(Expired) as caught:
        make_engine().start(make_token())
    assert caught.value.code == "LICENSE_EXPIRED"


def test_last_second_of_grace_is_still_grace(make_engine, make_token, clock):
    clock.now = NOW + 30 * DAY + 14 * DAY
    assert make_engine().start(make_token()) == "SVC_LIC_GRACE"


def test_perpetual_license_never_expires(make_engine, make_token, clock):
    clock.now = NOW + 50 * 365 * DAY
    assert make_engine().start(make_token(exp=0, grace_days=0)) == "active"


def test_not_yet_valid_token_is_refused_as_expired(make_engine, make_token):
    with pytest.raises(Expired, match="not valid before"):
        make_engine().start(make_token(nbf=NOW + 3600))


def test_nbf_within_clock_leeway_is_accepted(make_engine, make_token):
    assert make_engine().start(make_token(nbf=NOW + 60)) == "active"


def test_expiry_while_running_stops_analytics_not_video(make_engine, make_token, clock, caplog):
    engine = make_engine()
    engine.start(make_token())
    with engine.open_stream() as stream:
        clock.now = NOW + 30 * DAY + 1
        engine.count(frames=1)
        assert engine.state == "SVC_LIC_GRACE"
        clock.now = NOW + 44 * DAY + 1
        with caplog.at_level(logging.WARNING, logger="devices"):
            assert engine.admit_frame(stream) is True
        assert engine.state == "LICENSE_EXPIRED"
        with pytest.raises(Expired):
            engine.require("detect")
        with pytest.raises(Expired):
            engine.count(inferences=1)
        assert engine.admit_frame(stream) is True
    with engine.open_stream() as again:
        assert engine.admit_frame(again) is True


def test_expired_at_start_leaves_video_path_usable(make_engine, make_token, clock):
    clock.now = NOW + 60 * DAY
    engine = make_engine()
    with pytest.raises(Expired):
        engine.start(make_token())
    with engine.open_stream() as stream:
        assert engine.admit_frame(stream) is True
    with pytest.raises(Expired):
        engine.count(frames=1)


def write_status(state_dir, key, **fields):
    document = signed_status(key, **fields)
    (state_dir / "status.json").write_text(json.dumps({"format": 1, "statuses": [document]}))


def test_revoked_in_held_signed_status_is_refused(make_engine, make_token, state_dir, signing_key):
    write_status(state_dir, signing_key, seq=3, revoked_at=NOW - 100)
    with pytest.raises(Revoked) as caught:
        make_engine().start(make_token())
    assert caught.value.code == "LICENSE_REVOKED"


def test_status_of_another_license_neither_refuses_nor_covers(
    make_engine, make_token, state_dir, signing_key
):
    write_status(state_dir, signing_key, license_id="LIC-OTHER", seq=3, revoked_at=NOW - 100)
    with pytest.raises(SyncRequired, match="no signed status of licence"):
        make_engine().start(make_token())
    write_status(state_dir, signing_key, seq=3)
    assert make_engine().start(make_token()) == "active"


def test_false_entitlement_is_not_entitled(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token())
    engine.require("detect")
    with pytest.raises(NotEntitled) as caught:
        engine.require("anpr")
    assert caught.value.code == "NOT_ENTITLED"
    with pytest.raises(NotEntitled):
        engine.require("unknown-module")


def test_calls_before_start_are_refused(make_engine):
    engine = make_engine()
    for call in (lambda: engine.require("detect"), lambda: engine.count(frames=1)):
        with pytest.raises(LicenseError, match="not started"):
            call()
    with pytest.raises(LicenseError, match="not started"), engine.open_stream():
        pass


def test_streams_past_max_streams_are_refused(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token(lim={"max_streams": 2, "max_fps": 15, "api_calls": 0}))
    with engine.open_stream(), engine.open_stream():
        with pytest.raises(StreamLimit) as caught, engine.open_stream():
            pass
        assert caught.value.code == "STREAM_LIMIT"
    with engine.open_stream(), engine.open_stream():  # closing a stream frees its slot
        pass


def test_frames_past_max_fps_per_stream_per_second_are_not_admitted(make_engine, make_token, clock):
    engine = make_engine()
    engine.start(make_token(lim={"max_streams": 2, "max_fps": 3, "api_calls": 0}))
    with engine.open_stream() as first, engine.open_stream() as second:
        assert [engine.admit_frame(first) for _ in range(5)] == [True] * 3 + [False] * 2
        assert engine.admit_frame(second) is True  # the cap is per stream
        clock.advance(0.5)
        assert engine.admit_frame(first) is False  # same second of the clock
        clock.advance(0.5)
        assert [engine.admit_frame(first) for _ in range(4)] == [True] * 3 + [False]
        assert (first.frames_admitted, first.frames_dropped) == (6, 4)


def test_quota_counts_inferences_and_refuses_past_api_calls(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token(lim={"max_streams": 1, "max_fps": 10, "api_calls": 10}))
    engine.count(inferences=7, frames=100, events=3)
    engine.count(inferences=3)
    assert engine.quota_remaining == 0
    with pytest.raises(QuotaExceeded) as caught:
        engine.count(inferences=1)
    assert caught.value.code == "QUOTA_EXCEEDED"
    engine.count(frames=5, stream_seconds=1)  # non-inference usage is not quota
    assert engine.usage["inferences"] == 10 and engine.usage["frames"] == 105


def test_refused_count_is_not_metered(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token(lim={"max_streams": 1, "max_fps": 10, "api_calls": 5}))
    engine.count(inferences=4)
    with pytest.raises(QuotaExceeded):
        engine.count(inferences=2, frames=9)
    assert engine.quota_used == 4 and engine.usage["frames"] == 0


def test_zero_api_calls_is_unmetered(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token())
    engine.count(inferences=10_000_000)
    assert engine.quota_remaining is None


def test_negative_counts_are_rejected(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token())
    with pytest.raises(ValueError):
        engine.count(frames=-1)


def test_reboot_resumes_counters_from_disk(make_engine, make_token):
    token = make_token(lim={"max_streams": 1, "max_fps": 10, "api_calls": 5000})
    engine = make_engine()
    engine.start(token)
    engine.count(inferences=1200, frames=40)
    del engine  # power cut: no close()
    rebooted = make_engine()
    rebooted.start(token)
    assert rebooted.quota_used >= 1200  # at most one reserved block is lost, never given back
    assert rebooted.quota_used <= 1200 + engine_module.QUOTA_BLOCK
    assert rebooted.usage["frames"] == 40


def test_clean_shutdown_resumes_exact_counters(make_engine, make_token):
    token = make_token(lim={"max_streams": 1, "max_fps": 10, "api_calls": 5000})
    with make_engine() as engine:
        engine.start(token)
        engine.count(inferences=42, frames=7, stream_seconds=3, events=1)
    rebooted = make_engine()
    rebooted.start(token)
    assert rebooted.quota_used == 42
    assert rebooted.usage == {
        "period_start": NOW // 3600 * 3600,
        "period_end": NOW // 3600 * 3600 + 3600,
        "inferences": 42,
        "frames": 7,
        "stream_seconds": 3,
        "events": 1,
    }


def test_quota_is_reserved_on_disk_before_use(make_engine, make_token, state_dir):
    engine = make_engine()
    engine.start(make_token(lim={"max_streams": 1, "max_fps": 10, "api_calls": 5000}))
    engine.count(inferences=1)
    persisted = json.loads((state_dir / "state.json").read_text())["quota"]["LIC-0123456789"]
    assert persisted >= 1
    engine.count(inferences=persisted - 1)  # still inside the reservation: no write
    writes = engine.state_writes
    engine.count(inferences=1)  # beyond it: a new block is persisted first
    assert engine.state_writes == writes + 1
    assert json.loads((state_dir / "state.json").read_text())["quota"]["LIC-0123456789"] > (
        persisted
    )


def test_hot_path_writes_state_at_most_once_per_clock_second(make_engine, make_token, clock):
    engine = make_engine()
    engine.start(make_token())
    writes = engine.state_writes
    with engine.open_stream() as stream:
        for _ in range(500):
            engine.admit_frame(stream)
            engine.count(frames=1)
            clock.advance(0.001)
        assert engine.state_writes == writes  # 0.5 s of clock: no write at all
        for _ in range(3000):
            engine.admit_frame(stream)
            engine.count(frames=1)
            clock.advance(0.001)
        assert engine.state_writes == writes + 3  # 3 more clock seconds: 3 checkpoints


def test_nothing_but_activate_and_sync_touches_the_network(
    make_engine, make_token, monkeypatch, state_dir
):
    def no_network(*args, **kwargs):
        raise AssertionError("network used offline")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    engine = make_engine()
    engine.start(make_token(lim={"max_streams": 1, "max_fps": 10, "api_calls": 100}))
    engine.require("detect")
    with engine.open_stream() as stream:
        engine.admit_frame(stream)
    engine.count(inferences=1, frames=1)
    engine.close()
    assert devices.fingerprint(environ={"SVC_DEVICE_ID": "x"}, root=state_dir).value == "x"


def test_public_key_override_replaces_compiled_in_key(make_token, state_dir, monkeypatch):
    monkeypatch.setattr(devices.pubkey, "PUBLIC_KEY", _other_public_key())
    with pytest.raises(BadSignature):
        Engine(state_dir, device_id=DEVICE).start(make_token())


def test_compiled_in_key_is_used_without_override(make_token, public_key, state_dir, monkeypatch):
    monkeypatch.setattr(devices.pubkey, "PUBLIC_KEY", public_key)
    engine = Engine(state_dir, device_id=DEVICE, clock=lambda: NOW)
    assert engine.start(make_token()) == "active"


def test_no_public_key_at_all_is_a_clear_error(state_dir, monkeypatch):
    monkeypatch.setattr(devices.pubkey, "PUBLIC_KEY", None)
    with pytest.raises(LicenseError, match="no licence public key") as caught:
        Engine(state_dir, device_id=DEVICE)
    assert caught.value.code == "NO_PUBLIC_KEY"


def test_start_reads_stored_unit_token_by_default(make_engine, make_token, state_dir):
    (state_dir / "license.token").write_text(make_token() + "\n")
    assert make_engine().start() == "active"


def test_damaged_state_file_is_set_aside_and_analytics_wait_for_sync(
    make_engine, make_token, state_dir
):
    (state_dir / "state.json").write_text('{"hwm": 1, "quota": ')
    engine = make_engine()
    with pytest.raises(LicenseError) as caught:
        engine.start(make_token())
    assert caught.value.code == "SYNC_REQUIRED" and "damaged" in str(caught.value)
    assert (state_dir / "state.json.damaged").read_text() == '{"hwm": 1, "quota": '
    with engine.open_stream() as stream:  # the video path keeps running
        assert engine.admit_frame(stream)


def test_damaged_state_of_an_air_gapped_device_is_reported_not_reset(
    make_engine, make_token, state_dir
):
    (state_dir / "state.json").write_text('{"hwm": 1, "quota": ')
    with pytest.raises(LicenseError) as caught:
        make_engine(air_gapped=True)
    assert caught.value.code == "STATE_CORRUPT"


def _other_public_key() -> str:
    from devices.token import public_key_b64url

    return public_key_b64url(Ed25519PrivateKey.generate().public_key())
