"""The device's conditional status fetch (issue 46): it names the status it holds in
If-None-Match (the hash of the document, ``devices.documents.status_etag``), and a 304
keeps that status exactly as it is: a 304 never extends its lease end or moves its
signing time, from the service or from a cache in front of it."""

from __future__ import annotations

import json

import pytest

import devices
from devices.documents import status_etag

DAY = 86400
STATUS = "/v1/revocations/status"


@pytest.fixture
def perpetual(make_token, state_dir) -> str:
    text = make_token(exp=0)
    (state_dir / "license.token").write_text(text + "\n")
    return text


def _held_text(state_dir) -> str:
    return json.loads((state_dir / "status.json").read_text())["statuses"][0]


def _floors(state_dir) -> dict:
    state = json.loads((state_dir / "state.json").read_text())
    return state["status"]  # the (seq, signing time) floor of each status held


def test_the_sync_names_the_status_held_and_a_304_keeps_it(
    make_engine, perpetual, clock, service, state_dir
):
    engine = make_engine()
    engine.start(perpetual)
    clock.now = service.now = service.now + 10
    engine.sync(service.url, allow_http=True)
    held = _held_text(state_dir)
    floors = _floors(state_dir)
    service.reply("GET", STATUS, 304, None)
    clock.now = service.now = service.now + 3600
    summary = engine.sync(service.url, allow_http=True)
    asked = service.calls(STATUS)[-1]["headers"].get("If-None-Match")
    assert asked == status_etag(held)
    assert summary["errors"] == [] and summary["stale"] is False
    assert _held_text(state_dir) == held
    assert _floors(state_dir) == floors  # the status's floor did not move


def test_a_304_never_extends_the_lease_of_the_status_held(
    make_engine, perpetual, clock, service, state_dir
):
    service.lease_seconds = 7 * DAY
    engine = make_engine()
    engine.start(perpetual)
    start = service.now
    clock.now = service.now = start + 10
    lease_end = engine.sync(service.url, allow_http=True)["lease_end"]
    assert lease_end == start + 10 + 7 * DAY
    service.reply("GET", STATUS, 304, None)
    clock.now = service.now = start + 8 * DAY  # past the held status's lease end
    summary = engine.sync(service.url, allow_http=True)
    assert summary["lease_end"] == lease_end and summary["errors"] == []
    with pytest.raises(devices.LeaseExpired):
        engine.require("detect")


def test_a_304_for_a_status_never_held_is_a_failed_sync(make_engine, perpetual, service, state_dir):
    (state_dir / "status.json").unlink()  # no status held: nothing to keep
    service.reply("GET", STATUS, 304, None)
    engine = make_engine()
    with pytest.raises(devices.LicenseError) as caught:
        engine.sync(service.url, allow_http=True)
    assert "SYNC_FAILED" in caught.value.summary["errors"]
    assert not (state_dir / "status.json").exists()
