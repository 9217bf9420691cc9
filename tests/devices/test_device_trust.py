"""What the device believes, and why: signed licence statuses, signed usage receipts,
https only, and local files that cannot unlock anything (issue: revocation nobody on the
network path can forge). The stand-in service signs with the test key; each test plays
one attack or failure against it."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import devices
from devices import ClockRollback, LicenseError, Revoked, SyncRequired
from devices.documents import status_etag
from tests.devices.device_support import DEVICE, LICENSE, NOW, signed_status

HOUR = 3600
PERIOD = NOW // HOUR * HOUR


@pytest.fixture
def running(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token())
    return engine


def sync(engine, service):
    return engine.sync(service.url, allow_http=True)


def one_closed_period(engine, clock, inferences=5):
    engine.count(inferences=inferences)
    clock.now = PERIOD + HOUR + 1
    engine.count(frames=1)
    assert len(engine.pending_records) == 1


def held(state_dir):
    return (state_dir / "status.json").read_text()


STATUS = "/v1/revocations/status"


# -- the licence status: the revocation list's word on the licence held ------------------


def flip(text: str, at: int) -> str:
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :]


@pytest.mark.parametrize(
    ("forge", "code"),
    [
        ("unsigned", "LIST_BAD_SIGNATURE"),
        ("flipped", "LIST_BAD_SIGNATURE"),
        ("stripped", "LIST_BAD_SIGNATURE"),
        ("other key", "LIST_BAD_SIGNATURE"),
        ("a list page", "LIST_BAD_SIGNATURE"),
        ("another licence", "LIST_WRONG_LICENSE"),
        ("another device", "LIST_WRONG_LICENSE"),
        ("future", "LIST_FROM_FUTURE"),
        # A 304 keeps the held status and is no error since issue 46:
        # tests/devices/test_device_status_cache.py.
    ],
)
def test_forged_or_foreign_status_is_refused_and_the_held_one_kept(
    running, service, state_dir, make_engine, make_token, forge, code
):
    service.revoked = [("LIC-A", 0)]
    sync(running, service)
    before = held(state_dir)
    genuine = service.status_document(LICENSE, DEVICE)
    answers = {
        # what older servers sent: plain fields, no signature (an attacker can write them)
        "unsigned": (200, {"revoked": False, "as_of": 2**53}),
        "flipped": (200, {"status": flip(genuine, 40)}),
        # a revoked status with the genuine signature of an unrevoked one
        "stripped": (200, {"status": ".".join(
            [*signed_status(service.key, seq=1, revoked_at=NOW).split(".")[:2],
             genuine.split(".")[2]]
        )}),
        "other key": (200, {"status": signed_status(Ed25519PrivateKey.generate(), seq=9)}),
        "a list page": (200, {"status": service.page(0)}),
        "another licence": (200, {"status": signed_status(service.key, license_id="LIC-A", seq=9)}),
        "another device": (200, {"status": signed_status(service.key, device_id="cam-9", seq=9)}),
        "future": (200, {"status": signed_status(service.key, seq=9, issued_at=2**40)}),
    }  # fmt: skip
    service.reply("GET", STATUS, *answers[forge])
    with pytest.raises(LicenseError) as caught:
        sync(running, service)
    assert caught.value.code == code
    assert held(state_dir) == before
    running.require("detect")  # nothing learned, nothing lost
    assert make_engine().start(make_token()) == "active"


@pytest.mark.parametrize("replayed_at", [NOW - 3600, NOW + 200])
def test_revoked_license_stays_revoked_after_a_forged_or_replayed_status(
    running, service, make_engine, make_token, replayed_at
):
    service.revoked = [(LICENSE, 0)]
    with pytest.raises(Revoked):
        sync(running, service)
    # Even a genuine unrevoked status signed LATER (a list rebuilt, or a key misused)
    # never lifts a revocation the device holds.
    unrevoked = signed_status(service.key, seq=5, issued_at=replayed_at)
    service.reply("GET", STATUS, 200, {"status": unrevoked})
    with pytest.raises(Revoked) as caught:
        sync(running, service)
    assert caught.value.summary["errors"] == [] and caught.value.summary["stale"] is True
    with pytest.raises(Revoked):
        make_engine().start(make_token())


def test_every_sync_fetches_the_status_and_never_the_list(running, service, state_dir):
    service.revoked = [("LIC-A", 0)]
    held_texts = []
    sync(running, service)
    held_texts.append(json.loads(held(state_dir))["statuses"][0])
    sync(running, service)
    held_texts.append(json.loads(held(state_dir))["statuses"][0])
    service.revoked.append(("LIC-B", 0))
    assert sync(running, service)["list_seq"] == 2
    calls = service.calls(STATUS)
    assert len(calls) == 3 and service.calls("/v1/revocations") == []
    # Conditional on the status held (issue 46): each names the one the last sync kept.
    assert [c["headers"].get("If-None-Match") for c in calls][1:] == [
        status_etag(text) for text in held_texts[:2]
    ]


def test_a_license_not_yet_seen_waits_for_its_status(make_engine, make_token, service, state_dir):
    service.revoked = [(f"LIC-{n:04d}", 0) for n in range(10)] + [("LIC-NEW", 0)]
    engine = make_engine()
    (state_dir / "license.token").write_text(make_token(lic="LIC-NEW"))
    with pytest.raises(SyncRequired, match="no signed status of licence LIC-NEW"):
        engine.start(make_token(lic="LIC-NEW"))
    with pytest.raises(SyncRequired):
        engine.require("detect")
    with pytest.raises(Revoked) as caught:
        sync(engine, service)
    assert (caught.value.summary["revoked"], caught.value.summary["list_seq"]) == (True, 11)
    assert len(service.calls(STATUS)) == 1
    statuses = json.loads(held(state_dir))["statuses"]
    assert len(statuses) == 2  # LIC-NEW's and the provisioned licence's


# -- usage receipts --------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        lambda service, request: (200, {"accepted": 1, "duplicates": 0}),
        lambda service, request: (200, {"accepted": 1, "receipt": "SVCU1.e30.AAAA"}),
        lambda service, request: (
            200,
            {"receipt": flip(service.receipt(request), 30)},
        ),
        lambda service, request: (
            200,
            {"receipt": service.receipt({"json": {**request["json"], "nonce": "replayed"}})},
        ),
        lambda service, request: (
            200,
            {"receipt": service.receipt({"json": {**request["json"], "device_id": "cam-9"}})},
        ),
    ],
    ids=["no receipt", "garbage", "tampered", "replayed", "other device"],
)
def test_a_forged_200_never_costs_a_spooled_record(running, clock, service, answer):
    one_closed_period(running, clock)
    service.on("POST", "/v1/usage", lambda request: answer(service, request))
    with pytest.raises(LicenseError) as caught:
        sync(running, service)
    assert caught.value.code == "RECEIPT_INVALID"
    assert len(running.pending_records) == 1
    service.on("POST", "/v1/usage", service.accept)
    sync(running, service)
    assert running.pending_records == []


def test_only_records_the_receipt_covers_leave_the_spool(running, clock, service):
    one_closed_period(running, clock)
    clock.now = PERIOD + 2 * HOUR + 1
    running.count(frames=1)
    first, second = running.pending_records
    service.on(
        "POST",
        "/v1/usage",
        lambda request: (
            200,
            {"receipt": service.receipt(request, [(first["period_start"], first["period_end"])])},
        ),
    )
    summary = sync(running, service)
    assert running.pending_records == [second] and summary["deferred"] == 1


# -- sync order ------------------------------------------------------------------------


def test_usage_failure_does_not_block_the_status(running, clock, service):
    one_closed_period(running, clock)
    service.revoked = [(LICENSE, 0)]
    service.reply("POST", "/v1/usage", 503, {"detail": "maintenance"})
    with pytest.raises(Revoked) as caught:  # the revocation is the signal, whatever failed
        sync(running, service)
    assert caught.value.summary["errors"] == ["SYNC_FAILED"]
    assert caught.value.summary["revoked"] is True and caught.value.summary["list_seq"] == 1


def test_status_failure_does_not_block_usage_and_usage_goes_first(running, clock, service):
    one_closed_period(running, clock)
    service.reply("GET", STATUS, 500, {"detail": "boom"})
    with pytest.raises(LicenseError) as caught:
        sync(running, service)
    assert caught.value.code == "SYNC_FAILED" and "boom" in str(caught.value)
    assert running.pending_records == []
    assert [r["path"] for r in service.requests] == ["/v1/usage", STATUS, "/v1/license"]


# -- transport -------------------------------------------------------------------------


def test_plain_http_is_refused_unless_allowed(running, service, tmp_path):
    with pytest.raises(LicenseError) as caught:
        running.sync(service.url)
    assert caught.value.code == "INSECURE_URL"
    with pytest.raises(LicenseError) as caught:
        devices.activate(service.url, "B", tmp_path, device_id=DEVICE)
    assert caught.value.code == "INSECURE_URL"
    assert service.requests == []


# -- local state cannot unlock anything ------------------------------------------------


def test_deleted_status_refuses_analytics_until_synced(make_engine, make_token, state_dir, service):
    service.revoked = [(LICENSE, 0)]
    (state_dir / "status.json").unlink()
    (state_dir / "license.token").write_text(make_token())
    engine = make_engine()
    with pytest.raises(SyncRequired) as caught:
        engine.start(make_token())
    assert caught.value.code == "SYNC_REQUIRED" and "no licence status" in str(caught.value)
    with engine.open_stream() as stream:
        assert engine.admit_frame(stream)  # video keeps running
    with pytest.raises(Revoked):
        sync(engine, service)
    with pytest.raises(Revoked):
        make_engine().start(make_token())


def test_deleted_state_restores_the_quota_from_the_receipt(
    make_engine, make_token, state_dir, service, clock
):
    token = make_token(lim={"max_streams": 1, "max_fps": 30, "api_calls": 10_000})
    (state_dir / "license.token").write_text(token)
    engine = make_engine()
    engine.start(token)
    engine.count(inferences=9_000)
    clock.now = PERIOD + HOUR + 1
    engine.count(inferences=500)
    sync(engine, service)
    assert service.usage_total == 9_000
    (state_dir / "state.json").unlink()
    rebooted = make_engine()
    with pytest.raises(SyncRequired, match="no state file"):
        rebooted.start(token)
    with pytest.raises(SyncRequired):
        rebooted.count(inferences=1)
    with pytest.raises(SyncRequired):  # a restart does not clear it: the mark is on disk
        make_engine().start(token)
    rebooted = make_engine()
    sync(rebooted, service)  # an empty upload: its receipt carries the stored total
    assert rebooted.start(token) == "active"
    assert rebooted.quota_used == 9_500  # the open period's 500 survived in the journal
    with pytest.raises(devices.QuotaExceeded):
        rebooted.count(inferences=501)


def test_edited_high_water_mark_is_floored_by_the_signed_status_time(
    make_engine, make_token, state_dir, service, clock
):
    service.now = clock.now = NOW + 40 * 86400  # past exp (30 d), inside grace (14 d)
    engine = make_engine()
    assert engine.start(make_token()) == "SVC_LIC_GRACE"
    sync(engine, service)
    engine.close()
    state = json.loads((state_dir / "state.json").read_text())
    state["hwm"] = 0
    (state_dir / "state.json").write_text(json.dumps(state))
    clock.now = NOW  # set back to well inside the term
    with pytest.raises(ClockRollback):
        make_engine().start(make_token())


def test_bad_rtc_date_is_corrected_by_a_signed_receipt(
    make_engine, make_token, service, clock, state_dir
):
    (state_dir / "license.token").write_text(make_token(exp=0))
    clock.now = NOW + 10 * 365 * 86400  # a bad RTC date
    engine = make_engine()
    engine.start(make_token(exp=0))
    engine.close()
    clock.now = NOW  # the clock is right again
    with pytest.raises(ClockRollback):
        make_engine().start(make_token(exp=0))
    engine = make_engine()
    sync(engine, service)  # spool empty: an empty upload fetches the signed time
    assert [r["path"] for r in service.requests][0] == "/v1/usage"
    assert engine.start(make_token(exp=0)) == "active"


@pytest.mark.parametrize(
    "content",
    [b"[]", b'{"hwm": 1e400}', b'{"hwm": 99999999999999999999}', b'{"quota": {"L": -1}}',
     b"\xff\xfe", b'{"hwm": 1, "receipt": "SVCU1.e30.AAAA"}', b"[" * 100_000],
)  # fmt: skip
def test_damaged_state_is_a_coded_error_never_a_crash(
    make_engine, make_token, state_dir, service, content
):
    (state_dir / "state.json").write_bytes(content)
    engine = make_engine()
    with pytest.raises(SyncRequired):
        engine.start(make_token())
    sync(engine, service)
    assert make_engine().start(make_token()) == "active"


@pytest.mark.parametrize(
    "content",
    [b"{}", b"garbage", b'{"format": 1, "statuses": ["x"]}', b'{"statuses": {}}', b"[" * 100_000],
)
def test_damaged_status_file_is_a_coded_error(make_engine, make_token, state_dir, content):
    (state_dir / "status.json").write_bytes(content)
    with pytest.raises(SyncRequired):
        make_engine().start(make_token())


def test_unreadable_state_is_a_coded_error(make_engine, make_token, state_dir):
    (state_dir / "state.json").unlink()
    (state_dir / "state.json").mkdir()  # reading it fails with an OSError
    with pytest.raises(SyncRequired, match="cannot be read"):
        make_engine().start(make_token())


def test_one_engine_per_state_directory(state_dir, public_key, clock):
    first = devices.Engine(state_dir, public_key=public_key, device_id=DEVICE, clock=clock)
    with pytest.raises(LicenseError) as caught:
        devices.Engine(state_dir, public_key=public_key, device_id=DEVICE, clock=clock)
    assert caught.value.code == "STATE_LOCKED"
    first.close()
    devices.Engine(state_dir, public_key=public_key, device_id=DEVICE, clock=clock).close()


def test_air_gapped_engine_needs_no_list(tmp_path, public_key, clock, make_token):
    engine = devices.Engine(
        tmp_path / "s", public_key=public_key, device_id=DEVICE, clock=clock, air_gapped=True
    )
    assert engine.start(make_token()) == "active"
    engine.require("detect")
    engine.close()
