"""Metering that cannot be unbilled (issue 36), with real parts: a live gunicorn on the
production default list-head cache, whose clock the test moves with the cameras'
(SVC_TEST_CLOCK_FILE), the device module, and a proxy that rewrites the camera's
uploads. The camera's owner holds the camera's own token and uses it.

Each attack prints what it found, so the figures can be read from ``pytest -s``."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import devices
from billing.models import UsageConflict, UsageRecord
from devices.keys import split_license_file

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HOUR = 3600
START_IN_HOUR = 600  # each test starts ten minutes into an hour of both clocks


class SharedClock:
    """The cameras' clock: real time plus the offset the server's clock follows."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def moved(server_clock):
    shared = SharedClock()

    def to_next_hour(extra: float = 60) -> None:
        """Both clocks past the end of the hour the cameras are in."""
        now = shared()
        shared.offset += (now // HOUR + 1) * HOUR + extra - now
        server_clock(shared.offset)

    to_next_hour(extra=START_IN_HOUR)  # where in its hour a test starts is fixed, not the
    # wall clock's: a record of the current hour ends more than the 300 s leeway ahead
    to_next_hour.clock = shared
    to_next_hour.path = server_clock.path
    return to_next_hour


@pytest.fixture
def service(moved, moved_service):
    return moved_service


class RewritingProxy:
    """Forwards to the service; ``rewrite(body)`` may change a usage upload's JSON body
    on its way there (the answer comes back as the service gave it)."""

    def __init__(self, upstream: str) -> None:
        self.rewrite = None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if body and proxy.rewrite is not None and self.path.startswith("/v1/usage"):
                    body = json.dumps(proxy.rewrite(json.loads(body))).encode()
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "authorization", "if-none-match")
                }
                request = urllib.request.Request(
                    upstream + self.path, data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(request, timeout=60) as answer:
                        status, raw = answer.status, answer.read()
                except urllib.error.HTTPError as exc:
                    status, raw = exc.code, exc.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _forward  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(service):
    rewriting = RewritingProxy(service.url)
    yield rewriting
    rewriting.close()


def _batch(service, customer, units: int, sku: str = "API-METERED") -> dict:
    body = {"customer_id": customer.id, "sku": sku, "units": units}
    return service.admin("POST", "/v1/admin/batches", body)


def _camera(url, batch, name, signing_key, moved, tmp_path, device_id=None):
    state = tmp_path / name
    device_id = device_id or name
    devices.activate(url, batch["batch_token"], state, device_id=device_id, allow_http=True)
    key = devices.token.public_key_b64url(signing_key.public_key())
    engine = devices.Engine(state, public_key=key, device_id=device_id, clock=moved.clock)
    assert engine.start() == "active"
    return engine, state


def _upload(service, engine, records: list[dict]) -> dict:
    """POST records with the camera's own token, as its owner can."""
    text = (engine.state_dir / "license.token").read_text()
    token, _ = split_license_file(text.strip())
    body = {"device_id": engine.device_id, "records": records}
    request = urllib.request.Request(
        f"{service.url}/v1/usage",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def _stored(license_id: str) -> int:
    return sum(
        UsageRecord.objects.filter(license_id=license_id).values_list("inferences", flat=True)
    )


def _record(start: int, inferences: int = 0) -> dict:
    return {"period_start": start, "period_end": start + HOUR, "inferences": inferences,
            "frames": 0, "stream_seconds": 0, "events": 0}  # fmt: skip


def test_records_registered_ahead_with_the_camera_token_never_unbill_its_count(
    service, customer, signing_key, moved, tmp_path
):
    engine, _ = _camera(service.url, _batch(service, customer, 2), "cam-pre", signing_key,
                        moved, tmp_path)  # fmt: skip
    hour = int(moved.clock()) // HOUR * HOUR
    ahead = _upload(service, engine, [_record(hour + HOUR * i) for i in range(1000)])
    print(f"\npre-registration: accepted {ahead['accepted']}, refused {len(ahead['refused'])}")
    assert ahead["accepted"] == 0 and len(ahead["refused"]) == 1000
    engine.count(inferences=900)
    moved()
    summary = engine.sync(service.url, allow_http=True)
    print(f"camera then: accepted {summary['accepted']}, conflicts {summary['conflicts']}, "
          f"stored {_stored(engine.license_id)}")  # fmt: skip
    assert summary["accepted"] == 1 and summary["errors"] == []
    assert _stored(engine.license_id) == 900


def test_a_record_registered_in_the_last_minutes_is_a_conflict_kept_for_review(
    service, customer, signing_key, moved, tmp_path
):
    """Registered within the five minutes' leeway, the owner's zero is stored first; the
    camera's real count is then a conflict: reported on the camera, kept on the service,
    and the camera's quota keeps it."""
    engine, _ = _camera(service.url, _batch(service, customer, 2), "cam-late", signing_key,
                        moved, tmp_path)  # fmt: skip
    engine.count(inferences=900)
    hour = int(moved.clock()) // HOUR * HOUR
    moved(extra=-120)  # two minutes before the hour ends
    assert _upload(service, engine, [_record(hour)])["accepted"] == 1
    moved()
    summary = engine.sync(service.url, allow_http=True)
    conflict = UsageConflict.objects.get(license_id=engine.license_id)
    print(
        f"\nlate registration: camera conflicts {summary['conflicts']}, service holds "
        f"{conflict.held_inferences}, kept for review {conflict.sent_inferences}"
    )
    assert summary["conflicts"] == 1 and summary["pending"] == 0
    assert (conflict.held_inferences, conflict.sent_inferences) == (0, 900)
    assert engine.quota_used >= 900


def test_a_proxy_zeroing_uploads_neither_deletes_the_count_nor_reopens_the_quota(
    service, proxy, customer, signing_key, moved, tmp_path
):
    engine, state = _camera(proxy.url, _batch(service, customer, 2), "cam-zero", signing_key,
                            moved, tmp_path)  # fmt: skip
    engine.count(inferences=1_000_000)  # API-METERED: api_calls 1,000,000
    with pytest.raises(devices.QuotaExceeded):
        engine.count(inferences=1)
    moved()

    def zero(body):
        for record in body["records"]:
            record["inferences"] = 0
        return body

    proxy.rewrite = zero
    summary = engine.sync(proxy.url, allow_http=True)
    print(f"\nzeroing proxy: accepted {summary['accepted']}, conflicts {summary['conflicts']}, "
          f"pending {summary['pending']}, set aside {summary['set_aside']}, stored "
          f"{_stored(engine.license_id)}")  # fmt: skip
    assert summary["conflicts"] == 1 and summary["set_aside"] == 1
    engine.close()
    (state / "state.json").unlink()
    proxy.rewrite = None
    rebooted = devices.Engine(state, public_key=devices.token.public_key_b64url(
        signing_key.public_key()), device_id="cam-zero", clock=moved.clock)  # fmt: skip
    rebooted.sync(service.url, allow_http=True)
    assert rebooted.start() == "active"
    print(f"state.json deleted, synced: quota used {rebooted.quota_used:,}")
    assert rebooted.quota_used >= 1_000_000
    with pytest.raises(devices.QuotaExceeded):
        rebooted.count(inferences=1)
    rebooted.close()


def test_two_licenses_on_one_camera_are_both_stored(
    service, customer, signing_key, moved, tmp_path
):
    one, _ = _camera(service.url, _batch(service, customer, 1), "lic-one", signing_key, moved,
                     tmp_path, device_id="cam-two")  # fmt: skip
    two, _ = _camera(service.url, _batch(service, customer, 1), "lic-two", signing_key, moved,
                     tmp_path, device_id="cam-two")  # fmt: skip
    one.count(inferences=111)
    two.count(inferences=222)
    moved()
    first = one.sync(service.url, allow_http=True)
    second = two.sync(service.url, allow_http=True)
    print(
        f"\ntwo licences: {first['accepted']} + {second['accepted']} accepted, stored "
        f"{_stored(one.license_id)} and {_stored(two.license_id)}"
    )
    assert (_stored(one.license_id), _stored(two.license_id)) == (111, 222)
    assert second["duplicates"] == 0 and second["conflicts"] == 0


def test_honest_first_syncs_never_fail_on_list_heads_of_different_workers(
    service, customer, signing_key, moved, tmp_path
):
    """30 cameras activate and sync at once while revocations move the list's head; the
    service runs 3 workers with the default 1 s head cache."""
    batch = _batch(service, customer, 30, sku="DETECT-STD")
    victims = [
        service.admin("POST", "/v1/admin/licenses",
                      {"customer_id": customer.id, "sku": "DETECT-STD", "device_id": f"v-{n}"})
        for n in range(30)
    ]  # fmt: skip
    stop = threading.Event()

    def revoke() -> None:
        for victim in victims:
            if stop.is_set():
                return
            service.admin("POST", "/v1/admin/revoke",
                          {"license_id": victim["license_id"], "reason": "head moves"})  # fmt: skip
            time.sleep(0.05)

    mover = threading.Thread(target=revoke)
    mover.start()
    failures, stale = [], 0
    try:
        for n in range(30):
            engine, state = _camera(service.url, batch, f"honest-{n}", signing_key, moved,
                                    tmp_path)  # fmt: skip
            summary = engine.sync(service.url, allow_http=True)
            failures += summary["errors"]
            stale += summary["stale"]
            engine.close()
            shutil.rmtree(state)
    finally:
        stop.set()
        mover.join()
    print(f"\n30 honest first syncs: {len(failures)} failed, {stale} answered a head no newer")
    assert failures == []
