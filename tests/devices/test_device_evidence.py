"""The licence bites where it lives (issue 21): the device decides from documents the
authority signed and verifies them again from disk. Each test plays one attack by the
camera's owner (root on the camera: any file of the state directory) or by a proxy on
its network path, against the stand-in service, which signs like the real one."""

from __future__ import annotations

import json
import math
import shutil

import pytest

import devices
from devices import InvalidArgument, LicenseError, QuotaExceeded, Revoked, SyncRequired
from devices.bounds import LAST_SECOND, MAX_COUNTER
from tests.devices.device_support import DEVICE, HOUR, LICENSE, NOW, PERIOD, signed_status, sync


def revoke_and_learn(engine, service):
    service.revoked = [(LICENSE, 0)]
    with pytest.raises(Revoked) as caught:
        sync(engine, service)
    return caught.value


def read(state_dir, name):
    return json.loads((state_dir / name).read_text())


def write(state_dir, name, value):
    (state_dir / name).write_text(json.dumps(value))


# -- revocation: only a signed status decides, and a sync's verdict bites at once ------


def test_sync_that_learns_a_revocation_raises_even_with_an_empty_spool(running, service):
    assert running.pending_records == []
    caught = revoke_and_learn(running, service)
    assert caught.code == "LICENSE_REVOKED"
    assert caught.summary["revoked"] is True and caught.summary["list_seq"] == 1
    assert caught.summary["errors"] == []


def test_running_engine_stops_analytics_at_the_sync_that_learns_it(running, service):
    running.count(inferences=3)
    revoke_and_learn(running, service)
    with pytest.raises(Revoked):
        running.require("detect")
    with pytest.raises(Revoked):
        running.count(inferences=1)
    assert running.usage["inferences"] == 3  # nothing counted after the verdict
    with running.open_stream() as stream:  # the video path keeps running
        assert running.admit_frame(stream) is True
    assert running.revoked_licenses() == frozenset({LICENSE})


def test_revoked_license_never_starts_again_after_restart(running, service, make_engine, token):
    revoke_and_learn(running, service)
    with pytest.raises(Revoked, match="signed status at revocation-list sequence 1"):
        make_engine().start(token)


@pytest.mark.parametrize(
    "edit",
    [
        "state: floors removed",
        "state: deleted",
        "status: deleted",
        "status: older copy",
        "status: garbage",
        "status: another device's",
        "status: empty list",
        "status: forged unrevoked",
    ],
)
def test_no_single_file_edit_unrevokes(running, service, make_engine, token, state_dir, edit):
    older_status = (state_dir / "status.json").read_text()
    revoke_and_learn(running, service)
    assert "status" in read(state_dir, "state.json")  # the newest status's position
    target, _, how = edit.partition(": ")
    if edit == "state: floors removed":
        state = read(state_dir, "state.json")
        del state["status"]
        write(state_dir, "state.json", state)
    elif how == "deleted":
        (state_dir / f"{target}.json").unlink()
    elif how == "older copy":
        (state_dir / "status.json").write_text(older_status)
    elif how == "garbage":
        (state_dir / "status.json").write_text("{garbage")
    elif how == "another device's":
        other = signed_status(service.key, device_id="cam-0002", seq=5, issued_at=NOW)
        write(state_dir, "status.json", {"format": 1, "statuses": [other]})
    elif how == "empty list":
        write(state_dir, "status.json", {"format": 1, "statuses": []})
    elif how == "forged unrevoked":
        document = read(state_dir, "status.json")["statuses"][0]
        prefix, payload, signature = document.split(".")
        claims = json.loads(devices.token.b64url_decode(payload))
        claims.update(revoked=False, revoked_at=0)
        forged = devices.token.b64url_encode(json.dumps(claims).encode())
        write(
            state_dir, "status.json", {"format": 1, "statuses": [f"{prefix}.{forged}.{signature}"]}
        )
    with pytest.raises((Revoked, SyncRequired)):
        make_engine().start(token)


@pytest.mark.parametrize("status", [304, 200, 404, 502])
def test_a_proxy_answer_never_stands_in_for_a_status(
    running, service, make_engine, token, state_dir, status
):
    revoke_and_learn(running, service)
    (state_dir / "status.json").unlink()
    body = {"status": ""} if status == 200 else None
    service.reply("GET", "/v1/revocations/status", status, body)
    engine = make_engine()
    with pytest.raises(SyncRequired):
        engine.start(token)
    with pytest.raises(LicenseError) as caught:
        sync(engine, service)
    assert caught.value.code in {"SYNC_FAILED", "LIST_BAD_SIGNATURE"}
    with pytest.raises(SyncRequired):
        make_engine().start(token)


def test_replayed_unrevoked_status_is_refused_and_the_revocation_kept(running, service, state_dir):
    before = service.status_document(LICENSE, DEVICE)
    revoke_and_learn(running, service)
    service.reply("GET", "/v1/revocations/status", 200, {"status": before})
    with pytest.raises(Revoked) as caught:
        sync(running, service)
    assert caught.value.summary["errors"] == [] and caught.value.summary["stale"] is True
    with pytest.raises(Revoked):
        running.require("detect")


def test_whole_directory_restored_from_an_older_copy_runs_until_the_next_sync(
    running, service, make_engine, token, state_dir, tmp_path
):
    """The documented bound: the state directory is not secure storage. A whole older
    copy brings back that copy's evidence, so a licence revoked since runs until the
    device next reaches the service, which says revoked again."""
    copy = tmp_path / "copy"
    shutil.copytree(state_dir, copy)
    revoke_and_learn(running, service)
    running._dir_lock.release()
    shutil.rmtree(state_dir)
    shutil.copytree(copy, state_dir)
    engine = make_engine()
    assert engine.start(token) == "active"
    with pytest.raises(Revoked):
        sync(engine, service)
    with pytest.raises(Revoked):
        engine.count(inferences=1)


# -- usage and quota survive any one file ----------------------------------------------


def test_deleting_state_mid_period_loses_no_usage_and_returns_no_quota(
    running, service, make_engine, token, state_dir, clock
):
    running.count(inferences=999_990)
    clock.advance(2)
    running.count(frames=1)  # a checkpoint: the open period is on disk (state and journal)
    (state_dir / "state.json").unlink()
    engine = make_engine()
    with pytest.raises(SyncRequired):
        engine.start(token)
    sync(engine, service)
    assert engine.start(token) == "active"
    assert engine.quota_used == 999_990
    with pytest.raises(QuotaExceeded):
        engine.count(inferences=11)
    clock.now = PERIOD + HOUR + 1
    engine.count(frames=1)  # closes the hour: it is spooled and billed
    sync(engine, service)
    assert service.usage_total == 999_990


def test_zeroed_quota_counter_does_not_reopen_an_exhausted_quota(
    running, service, make_engine, token, state_dir, clock
):
    running.count(inferences=1_000_000)
    clock.now = PERIOD + HOUR + 1
    running.count(frames=1)
    sync(running, service)  # the receipt proves 1,000,000
    running.close()
    state = read(state_dir, "state.json")
    state["quota"] = {LICENSE: 0}
    write(state_dir, "state.json", state)
    engine = make_engine()
    assert engine.start(token) == "active"
    assert engine.quota_used == 1_000_000
    with pytest.raises(QuotaExceeded):
        engine.count(inferences=1)


@pytest.mark.parametrize("lost", ["spool.json", "usage.journal", "state.json"])
def test_usage_survives_the_loss_of_any_one_file(
    running, service, make_engine, token, state_dir, clock, lost
):
    running.count(inferences=700)
    clock.now = PERIOD + HOUR + 1
    running.count(inferences=40)  # the first hour is spooled, the second is open
    clock.advance(2)
    running.count(frames=1)
    running._dir_lock.release()  # the process dies: no clean close
    (state_dir / lost).unlink()
    engine = make_engine()
    if lost == "state.json":
        with pytest.raises(SyncRequired):
            engine.start(token)
        sync(engine, service)
    assert engine.start(token) == "active"
    assert engine.quota_used >= 740
    clock.now = PERIOD + 2 * HOUR + 1
    engine.count(frames=1)
    sync(engine, service)
    assert service.usage_total == 740


def test_spool_counts_edited_down_are_restored_from_the_journal(
    running, service, make_engine, token, state_dir, clock
):
    running.count(inferences=500)
    clock.now = PERIOD + HOUR + 1
    running.count(frames=1)
    running._dir_lock.release()
    spool = read(state_dir, "spool.json")
    spool["records"][0]["inferences"] = 1
    write(state_dir, "spool.json", spool)
    engine = make_engine()
    engine.start(token)
    assert engine.pending_records[0]["inferences"] == 500
    sync(engine, service)
    assert service.usage_total == 500


def test_a_journal_period_in_the_clock_s_future_is_closed_not_kept_open(
    running, service, make_engine, token, state_dir, clock
):
    running.count(inferences=5)
    running.close()
    future = [PERIOD + 100 * HOUR, PERIOD + 101 * HOUR, 9, 0, 0, 0]
    with open(state_dir / "usage.journal", "a") as fh:
        fh.write(json.dumps({"u": future, "h": 0}) + "\n")
    engine = make_engine()
    engine.start(token)
    assert engine.usage["period_start"] == PERIOD  # the clock's hour is the open one
    assert [r["inferences"] for r in engine.pending_records] == [9]


# -- bounds at the source --------------------------------------------------------------


@pytest.mark.parametrize("value", [2**80, MAX_COUNTER + 1])
def test_count_past_what_one_record_may_hold_is_refused_and_nothing_counted(running, value):
    with pytest.raises(LicenseError) as caught:
        running.count(frames=value)
    assert caught.value.code == "USAGE_OUT_OF_RANGE"
    assert running.usage["frames"] == 0
    running.count(frames=MAX_COUNTER)
    with pytest.raises(LicenseError, match="USAGE_OUT_OF_RANGE|per counter"):
        running.count(frames=1)


def test_a_spooled_record_the_service_would_refuse_is_set_aside_and_the_rest_flow(
    running, service, make_engine, token, state_dir, clock
):
    running.count(inferences=5)
    clock.now = PERIOD + HOUR + 1
    running.count(inferences=1)
    running.close()
    spool = read(state_dir, "spool.json")
    bad = dict(spool["records"][0], period_start=0, period_end=3600, inferences=10**13)
    spool["records"].insert(0, bad)
    write(state_dir, "spool.json", spool)
    engine = make_engine()
    engine.start(token)
    assert engine.set_aside_records == [bad]
    clock.now = PERIOD + 2 * HOUR + 1
    engine.count(frames=1)
    summary = sync(engine, service)
    assert summary["set_aside"] == 1 and summary["pending"] == 0
    assert service.usage_total == 6
    assert read(state_dir, "spool.rejected.json")["records"] == [bad]


# -- every failure is coded ------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda e: e.start(123),
        lambda e: e.sync(None),
        lambda e: e.sync("https://x", timeout=math.nan),
        lambda e: e.admit_frame(None),
        lambda e: e.count(inferences=1.5),
        lambda e: e.count(inferences=-1),
        lambda e: e.count(inferences=True),
        lambda e: e.require(None),
    ],
)
def test_wrong_arguments_are_coded_errors(running, call):
    with pytest.raises(InvalidArgument) as caught:
        call(running)
    assert caught.value.code == "BAD_ARGUMENT"
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "reading", [math.nan, math.inf, -1.0, 2.0**40 * 1000, LAST_SECOND + 1, "now"]
)
def test_a_clock_outside_the_calendar_is_refused_and_never_poisons_the_mark(
    running, clock, make_engine, token, reading
):
    good = clock.now
    clock.now = reading
    for call in (lambda: running.count(inferences=1), lambda: running.require("detect")):
        with pytest.raises(LicenseError) as caught:
            call()
        assert caught.value.code == "CLOCK_INVALID"
    with running.open_stream() as stream, pytest.raises(LicenseError):
        running.admit_frame(stream)
    running.close()
    clock.now = good
    assert make_engine().start(token) == "active"


def test_engine_arguments_are_checked(state_dir, public_key):
    for kwargs in ({"device_id": 7}, {"clock": 5}, {"clock_leeway": math.nan}):
        with pytest.raises(InvalidArgument):
            devices.Engine(state_dir, public_key=public_key, **kwargs)
    with pytest.raises(InvalidArgument):
        devices.Engine(None, public_key=public_key)


def test_non_ascii_license_file_is_a_coded_error(make_engine, state_dir):
    (state_dir / "license.token").write_bytes("SVC1.é.x\n".encode())
    with pytest.raises(LicenseError) as caught:
        make_engine().start()
    assert caught.value.code == "BAD_SIGNATURE"


def test_a_state_file_that_cannot_be_written_is_a_coded_error_and_nothing_counted(
    running, state_dir
):
    running.count(inferences=1)  # reserves the first block
    (state_dir / "state.json").unlink()
    (state_dir / "state.json").mkdir()  # os.replace onto a directory fails: a real OSError
    with pytest.raises(LicenseError) as caught:
        running.count(inferences=2_000)  # needs a new reservation on disk
    assert caught.value.code == "STATE_UNWRITABLE"
    assert running.quota_used == 1 and running.usage["inferences"] == 1


def test_a_list_rebuilt_after_a_restore_is_followed_and_a_replay_is_not(
    running, service, make_engine, token, state_dir, clock
):
    """Freshness is a later list position OR a later signing time: a service restored
    from a backup numbers again from lower (and signs later); a replay is older on both."""
    service.revoked = [("LIC-OTHER", 0)] * 5
    sync(running, service)  # holds sequence 5
    rebuilt = signed_status(service.key, seq=2, issued_at=NOW + 30)
    service.reply("GET", "/v1/revocations/status", 200, {"status": rebuilt})
    assert sync(running, service)["list_seq"] == 2
    replay = signed_status(service.key, seq=1, issued_at=NOW + 20)
    service.reply("GET", "/v1/revocations/status", 200, {"status": replay})
    summary = sync(running, service)
    assert summary["errors"] == [] and summary["stale"] is True  # reported, not applied
    running.close()
    assert make_engine().start(token) == "active"  # the rebuilt list's status is held
    state = read(state_dir, "state.json")
    assert state["status"][LICENSE] == [2, NOW + 30]


def test_an_older_status_signed_in_the_same_second_is_still_noticed(
    running, service, make_engine, token, state_dir
):
    """Found by tests/test_device_fuzz.py: two statuses signed in one second differ by
    their sequence only; the older one put back in status.json must not run."""
    same_second = signed_status(service.key, seq=0, issued_at=service.now)
    write(state_dir, "status.json", {"format": 1, "statuses": [same_second]})
    running.close()
    engine = make_engine()
    engine.start(token)
    older = (state_dir / "status.json").read_text()
    revoke_and_learn(engine, service)  # sequence 1, signed in the same second
    engine.close()
    (state_dir / "status.json").write_text(older)
    with pytest.raises(SyncRequired, match="older than one this device held"):
        make_engine().start(token)


def test_a_revoked_license_says_revoked_before_the_clock_is_judged(
    running, service, make_engine, token, clock
):
    revoke_and_learn(running, service)
    running.close()
    clock.now -= 3600  # a clock set back: the verdict is still the revocation
    with pytest.raises(Revoked):
        make_engine().start(token)
