"""Receipts bind counts (contract §7): a spooled record leaves the spool as delivered only
when the signed receipt holds exactly the counts sent; a receipt holding other counts
(a proxy zeroed the upload, the owner registered records ahead) or refusing a record for
good sets it aside, reported, counted against the quota in full, and never re-opens it.
"""

from __future__ import annotations

import json

import pytest

from devices import QuotaExceeded
from tests.devices.device_support import HOUR, PERIOD, sync

ZEROS = (0, 0, 0, 0)


def holding(service, held=None, refused=None):
    """The service answers with a receipt holding ``held`` counts per period (the rest
    as sent) and refusing ``refused``."""

    def answer(request):
        keys = [(r["period_start"], r["period_end"]) for r in request["json"]["records"]]
        counts = held(keys) if callable(held) else held or {}
        receipt = service.receipt(request, held=counts, refused=refused)
        return 200, {"accepted": 0, "duplicates": len(keys), "receipt": receipt}

    service.on("POST", "/v1/usage", answer)


def aside(state_dir):
    return json.loads((state_dir / "spool.rejected.json").read_text())["conflicts"]


def test_a_receipt_holding_other_counts_sets_the_record_aside_and_reports_it(
    running, service, clock, state_dir
):
    running.count(inferences=5_555, frames=3)
    clock.now = PERIOD + HOUR + 1
    holding(service, held=lambda keys: dict.fromkeys(keys, ZEROS))  # a zeroing proxy
    summary = sync(running, service)
    assert (summary["conflicts"], summary["refused"], summary["pending"]) == (1, 0, 0)
    assert summary["set_aside"] == 1 and summary["errors"] == []
    (entry,) = aside(state_dir)
    assert entry["why"] == "conflict" and entry["record"]["inferences"] == 5_555
    assert entry["held"] == {"inferences": 0, "frames": 0, "stream_seconds": 0, "events": 0}
    assert running.quota_used == 5_555
    # Set aside records are never sent again.
    service.on("POST", "/v1/usage", service.accept)
    assert sync(running, service)["accepted"] == 0
    assert len(service.calls("/v1/usage")) == 1  # nothing left to send


def test_a_record_the_receipt_holds_exactly_leaves_the_spool(running, service, clock):
    running.count(inferences=7)
    clock.now = PERIOD + HOUR + 1
    summary = sync(running, service)
    assert (summary["accepted"], summary["conflicts"], summary["pending"]) == (1, 0, 0)
    assert running.set_aside_records == []


def test_a_record_refused_for_good_is_set_aside_and_one_not_named_stays(
    running, service, clock, state_dir
):
    running.count(inferences=3)
    clock.now = PERIOD + HOUR + 1
    running.count(inferences=4)
    clock.now = PERIOD + 2 * HOUR + 1
    running.count(frames=1)
    first, second = (PERIOD, PERIOD + HOUR), (PERIOD + HOUR, PERIOD + 2 * HOUR)

    def answer(request):  # refuses the first for good, does not name the second
        return 200, {"receipt": service.receipt(request, records=[], refused=[first])}

    service.on("POST", "/v1/usage", answer)
    summary = sync(running, service)
    assert (summary["refused"], summary["conflicts"], summary["deferred"]) == (1, 0, 1)
    assert [e["why"] for e in aside(state_dir)] == ["refused"]
    assert [(r["period_start"], r["period_end"]) for r in running.pending_records] == [second]


def test_a_zeroed_upload_never_reopens_an_exhausted_quota_after_the_state_is_deleted(
    running, service, clock, state_dir, make_engine, token
):
    """The issue's attack: exhaust api_calls, sync through a proxy that zeroes the counts
    (the service stores and signs zeros), delete state.json, sync: still exhausted."""
    running.count(inferences=1_000_000)
    with pytest.raises(QuotaExceeded):
        running.count(inferences=1)
    clock.now = PERIOD + HOUR + 1
    holding(service, held=lambda keys: dict.fromkeys(keys, ZEROS))
    assert sync(running, service)["conflicts"] == 1
    running.close()
    (state_dir / "state.json").unlink()
    service.on("POST", "/v1/usage", service.accept)  # the service's total is 0
    engine = make_engine()
    sync(engine, service)
    assert engine.start(token) == "active"
    assert engine.quota_used == 1_000_000
    with pytest.raises(QuotaExceeded):
        engine.count(inferences=1)


def test_deleting_the_set_aside_file_sends_the_record_again_to_be_set_aside_again(
    running, service, clock, state_dir, make_engine, token
):
    running.count(inferences=900)
    clock.now = PERIOD + HOUR + 1
    holding(service, held=lambda keys: dict.fromkeys(keys, ZEROS))
    sync(running, service)
    running.close()
    (state_dir / "spool.rejected.json").unlink()
    engine = make_engine()
    engine.start(token)
    assert [r["inferences"] for r in engine.pending_records] == [900]  # from the journal
    assert engine.quota_used == 900
    assert sync(engine, service)["conflicts"] == 1
    assert engine.pending_records == [] and len(aside(state_dir)) == 1


def test_the_set_aside_file_is_not_spooled_again_at_every_start(
    running, service, clock, state_dir, make_engine, token
):
    running.count(inferences=900)
    clock.now = PERIOD + HOUR + 1
    holding(service, held=lambda keys: dict.fromkeys(keys, (1, 0, 0, 0)))
    sync(running, service)
    running.close()
    engine = make_engine()
    engine.start(token)
    assert engine.pending_records == []
    assert engine.quota_used == 900


def test_an_edited_set_aside_entry_counts_for_nothing_and_the_journal_keeps_the_count(
    running, service, clock, state_dir, make_engine, token
):
    running.count(inferences=900)
    clock.now = PERIOD + HOUR + 1
    holding(service, held=lambda keys: dict.fromkeys(keys, ZEROS))
    sync(running, service)
    running.close()
    data = json.loads((state_dir / "spool.rejected.json").read_text())
    data["conflicts"][0]["record"]["inferences"] = 1  # the owner lowers it
    (state_dir / "spool.rejected.json").write_text(json.dumps(data))
    data["conflicts"].append({"record": "junk", "lic": 5})
    (state_dir / "spool.rejected.json").write_text(json.dumps(data))
    (state_dir / "state.json").unlink()
    engine = make_engine()
    service.on("POST", "/v1/usage", service.accept)
    sync(engine, service)
    engine.start(token)
    assert engine.quota_used >= 900


def test_a_set_aside_entry_of_another_license_settles_nothing_of_this_one(
    running, service, clock, state_dir, make_engine, token
):
    """The set-aside file replaced by another camera's (or its licence edited): this
    camera's own hour comes back from the journal and is set aside again."""
    running.count(inferences=200)
    clock.now = PERIOD + HOUR + 1
    holding(service, held=lambda keys: dict.fromkeys(keys, ZEROS))
    sync(running, service)
    running.close()
    data = json.loads((state_dir / "spool.rejected.json").read_text())
    data["conflicts"][0]["lic"] = "LIC-ANOTHERONE"
    data["conflicts"][0]["record"]["inferences"] = 250
    (state_dir / "spool.rejected.json").write_text(json.dumps(data))
    engine = make_engine()
    engine.start(token)
    assert [r["inferences"] for r in engine.pending_records] == [200]
    assert engine.quota_used >= 200
    assert sync(engine, service)["conflicts"] == 1


def test_the_open_hour_edited_into_the_spool_is_counted_on_not_lost(
    running, service, clock, state_dir, make_engine, token
):
    running.count(inferences=600)
    clock.advance(60)
    running.close()
    state = json.loads((state_dir / "state.json").read_text())
    spool_file = state_dir / "spool.json"
    spool = json.loads(spool_file.read_text()) if spool_file.exists() else {"format": 1}
    zeroed = dict(state["open"], inferences=0, frames=0, stream_seconds=0, events=0)
    spool["records"] = [*spool.get("records", []), zeroed]
    spool_file.write_text(json.dumps(spool))  # the owner's edit while the camera is off
    engine = make_engine()
    engine.start(token)
    assert engine.usage["inferences"] == 600  # the hour is open again, with its counts
    clock.advance(60)
    engine.count(inferences=500)
    clock.now = PERIOD + HOUR + 1
    engine.count()
    assert [r["inferences"] for r in engine.pending_records] == [1100]
    assert engine.quota_used == 1100


def test_a_clock_stepped_back_while_running_still_checkpoints_every_second(
    running, clock, make_engine, token
):
    running.count(inferences=1, frames=25)
    clock.advance(1)
    running.count(inferences=1, frames=25)
    clock.advance(-250)  # NTP steps the clock back, within the 300 s leeway
    for _ in range(240):
        clock.advance(1)
        running.count(inferences=1, frames=25)
    counted = running.usage
    running._dir_lock.release()  # the process dies: no clean close
    engine = make_engine()
    engine.start(token)
    assert counted["inferences"] - engine.usage["inferences"] <= 1
    assert counted["frames"] - engine.usage["frames"] <= 25
