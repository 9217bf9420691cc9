"""Attacks on the network path, with real parts: the device module talks to the live
gunicorn service through a proxy started here that rewrites answers (flips a byte,
replays an older status, strips a revocation, answers 304, forges a receipt or a plain
future ``as_of``).
The device must refuse every forgery with a coded error, keep what it held, lose no
spooled record, and accept the genuine answers that follow."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import devices
from devices import documents
from tests.conftest import start_gunicorn, stop_gunicorn

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HOUR = 3600
T0 = 1_800_000_000 - 1_800_000_000 % HOUR

Rewrite = Callable[[str, int, dict], tuple[int, dict]]
STATUS = "/v1/revocations/status"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class TamperingProxy:
    """Forwards every request to the live service; ``rewrite(path, status, body)`` may
    change the JSON answer on its way back. Every genuine answer is recorded."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.rewrite: Rewrite | None = None
        self.seen: list[tuple[str, int, dict]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                # A proxy about to rewrite an answer wants it whole: it drops the
                # device's If-None-Match (the status held), as an attacker would.
                forwarded = ("content-type", "authorization")
                if proxy.rewrite is None:
                    forwarded += ("if-none-match",)
                headers = {k: v for k, v in self.headers.items() if k.lower() in forwarded}
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(request, timeout=60) as answer:
                        status, raw = answer.status, answer.read()
                except urllib.error.HTTPError as exc:
                    status, raw = exc.code, exc.read()
                payload = json.loads(raw) if raw else {}
                path = self.path.split("?")[0]
                proxy.seen.append((path, status, payload))
                if proxy.rewrite is not None and raw:
                    status, payload = proxy.rewrite(path, status, payload)
                data = json.dumps(payload).encode() if raw and payload is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(live_service) -> Iterator[TamperingProxy]:
    tampering = TamperingProxy(live_service.url)
    yield tampering
    tampering.close()


@pytest.fixture
def moved(server_clock, transactional_db, tmp_path):
    """A gunicorn of the test's own whose clock follows ``server_clock`` (the camera's
    time: a usage record must lie within its licence's life, and may not end in the
    service's future), and a tampering proxy in front of it."""
    logs = tmp_path / "gunicorn"
    logs.mkdir()
    live = start_gunicorn(logs, SVC_TEST_CLOCK_FILE=str(server_clock.path))
    tampering = TamperingProxy(live.url)
    try:
        yield live, tampering
    finally:
        tampering.close()
        stop_gunicorn(live)


def _camera(live_service, proxy, customer, signing_key, tmp_path, name: str, units: int = 3):
    """A camera activated through the proxy, its engine started."""
    batch = live_service.admin(
        "POST",
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": units},
    )
    state = tmp_path / name
    devices.activate(proxy.url, batch["batch_token"], state, device_id=name, allow_http=True)
    clock = Clock(T0 + 10)
    key = devices.token.public_key_b64url(signing_key.public_key())
    engine = devices.Engine(state, public_key=key, device_id=name, clock=clock)
    assert engine.start() == "active"
    return batch, engine, clock, key


def _payload(document: str) -> dict:
    part = document.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def _with_payload(document: str, payload: dict) -> str:
    """The document re-encoded with another payload and the original signature kept."""
    prefix, _, signature = document.split(".")
    encoded = devices.token.b64url_encode(documents.canonical_json(payload))
    return f"{prefix}.{encoded}.{signature}"


def test_status_forgeries_on_the_path_are_refused(
    live_service, proxy, customer, signing_key, tmp_path
):
    batch, engine, clock, key = _camera(live_service, proxy, customer, signing_key, tmp_path, "c1")
    license_id = engine.license_id
    _camera(live_service, proxy, customer, signing_key, tmp_path, "c9")  # another device
    engine.sync(proxy.url, allow_http=True)
    # The genuine status the camera holds (the sync may have been answered 304: the
    # status it got at activation is still the service's, issue 46).
    held_documents = json.loads((engine.state_dir / "status.json").read_text())["statuses"]
    older = [p for path, s, p in proxy.seen if path == STATUS and s == 200][-1:] or [
        {"status": d} for d in held_documents if _payload(d)["lic"] == license_id
    ]
    older = older[0]
    other = next(
        p
        for path, s, p in proxy.seen
        if path == "/v1/activate" and p.get("license_id") != license_id
    )
    held = (engine.state_dir / "status.json").read_text()
    # A 304 forged for the status the camera holds (conditional GET, issue 46) teaches
    # nothing either: the held document stays as it is, never extended (its own window
    # and lease end still bound it; tests/devices/test_device_status_cache.py).
    proxy.rewrite = lambda path, status, body: (304, None) if path == STATUS else (status, body)
    engine.sync(proxy.url, allow_http=True)
    assert (engine.state_dir / "status.json").read_text() == held
    engine.require("detect")
    proxy.rewrite = None
    live_service.admin("POST", "/v1/admin/revoke", {"license_id": license_id, "reason": "x"})

    def flip(path, status, body):
        if path == STATUS:
            doc = body["status"]
            body["status"] = doc[:30] + ("B" if doc[30] == "A" else "A") + doc[31:]
        return status, body

    def strip(path, status, body):
        if path == STATUS:
            payload = _payload(body["status"]) | {"revoked": False, "revoked_at": 0}
            body["status"] = _with_payload(body["status"], payload)
        return status, body

    def unsigned(path, status, body):
        if path == STATUS:
            return 200, {"revoked": False, "as_of": 2**53}  # plain fields only
        return status, body

    def future_signed(path, status, body):
        if path == STATUS:
            payload = _payload(body["status"]) | {"iat": 2**53}
            body["status"] = _with_payload(body["status"], payload)
        return status, body

    def another_device(path, status, body):
        return (200, {"status": other["status"]}) if path == STATUS else (status, body)

    for rewrite, code in [
        (flip, "LIST_BAD_SIGNATURE"),
        (strip, "LIST_BAD_SIGNATURE"),
        (unsigned, "LIST_BAD_SIGNATURE"),
        (future_signed, "LIST_BAD_SIGNATURE"),
        (another_device, "LIST_WRONG_LICENSE"),
    ]:
        proxy.rewrite = rewrite
        with pytest.raises(devices.LicenseError) as caught:
            engine.sync(proxy.url, allow_http=True)
        assert caught.value.code == code, rewrite.__name__
        assert (engine.state_dir / "status.json").read_text() == held
        engine.require("detect")  # nothing learned, nothing lost
    # The genuine answer: the running engine stops analytics at once.
    proxy.rewrite = None
    with pytest.raises(devices.Revoked) as caught:
        engine.sync(proxy.url, allow_http=True)
    assert caught.value.summary["revoked"] is True
    with pytest.raises(devices.Revoked):
        engine.require("detect")
    # A replay of the genuine older status (not revoked) is stale: not an error, not
    # taken; the revocation holds.
    proxy.rewrite = lambda path, status, body: (200, older) if path == STATUS else (status, body)
    with pytest.raises(devices.Revoked) as caught:
        engine.sync(proxy.url, allow_http=True)
    assert (caught.value.summary["errors"], caught.value.summary["stale"]) == ([], True)
    newest = json.loads((engine.state_dir / "status.json").read_text())["statuses"]
    assert documents.parse_status(newest[0], key).revoked
    engine.close()
    restarted = devices.Engine(engine.state_dir, public_key=key, device_id="c1", clock=clock)
    with pytest.raises(devices.Revoked):
        restarted.start()
    restarted.close()


def test_forged_receipts_never_cost_a_record(moved, server_clock, customer, signing_key, tmp_path):
    service, proxy = moved
    server_clock(T0 + 10 - time.time())  # the service activates the camera at its time
    _, engine, clock, _ = _camera(service, proxy, customer, signing_key, tmp_path, "c2")
    engine.count(inferences=40)
    clock.now = T0 + HOUR + 5
    server_clock(T0 + HOUR + 5 - time.time())  # the hour is over for the service too
    engine.count(inferences=2)
    genuine_receipts: list[str] = []

    def forged_ok(path, status, body):
        if path == "/v1/usage":
            genuine_receipts.append(body["receipt"])
            return 200, {"accepted": 1, "duplicates": 0}
        return status, body

    def forged_receipt(path, status, body):
        if path == "/v1/usage":
            payload = _payload(body["receipt"]) | {"records": [[0, 1]]}
            return 200, {"accepted": 1, "receipt": _with_payload(body["receipt"], payload)}
        return status, body

    def replayed_receipt(path, status, body):
        if path == "/v1/usage":
            return 200, {"accepted": 1, "receipt": genuine_receipts[0]}
        return status, body

    for rewrite in (forged_ok, forged_receipt, replayed_receipt):
        proxy.rewrite = rewrite
        with pytest.raises(devices.LicenseError) as caught:
            engine.sync(proxy.url, allow_http=True)
        assert caught.value.code == "RECEIPT_INVALID", rewrite.__name__
        assert len(engine.pending_records) == 1
    proxy.rewrite = None
    summary = engine.sync(proxy.url, allow_http=True)
    # The service stored the record on the first (forged) exchange; the genuine receipt
    # covers it as a duplicate and only then does it leave the spool.
    assert (summary["accepted"], summary["duplicates"], summary["pending"]) == (0, 1, 0)
    assert (summary["conflicts"], summary["refused"], summary["set_aside"]) == (0, 0, 0)
    usage = service.admin("GET", f"/v1/admin/usage/{engine.license_id}")
    assert (usage["inferences"], usage["records"]) == (40, 1)
    engine.close()


def test_plain_http_needs_an_explicit_opt_in(live_service, proxy, customer, tmp_path):
    batch = live_service.admin(
        "POST",
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 1},
    )
    with pytest.raises(devices.LicenseError) as caught:
        devices.activate(proxy.url, batch["batch_token"], tmp_path, device_id="c3")
    assert caught.value.code == "INSECURE_URL" and proxy.seen == []
