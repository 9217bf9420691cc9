"""Attacks on the network path, with real parts: the device module talks to the live
gunicorn service through a proxy started here that rewrites answers (flips a byte,
replays an older list, strips an entry, forges a receipt or a plain future ``as_of``).
The device must refuse every forgery with a coded error, keep what it held, lose no
spooled record, and accept the genuine answers that follow."""

from __future__ import annotations

import base64
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import devices
from devices import documents

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HOUR = 3600
T0 = 1_800_000_000 - 1_800_000_000 % HOUR

Rewrite = Callable[[str, int, dict], tuple[int, dict]]


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
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "authorization", "if-none-match")
                }
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
                data = json.dumps(payload).encode() if raw else b""
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
    encoded = documents.b64url_encode(documents.canonical_json(payload))
    return f"{prefix}.{encoded}.{signature}"


def test_list_forgeries_on_the_path_are_refused(
    live_service, proxy, customer, signing_key, tmp_path
):
    batch, engine, clock, key = _camera(live_service, proxy, customer, signing_key, tmp_path, "c1")
    license_id = engine.license_id
    # Another licence is revoked and synced: the device holds that list (older one saved).
    live_service.admin("POST", "/v1/admin/revoke", {"license_id": batch["license_id"]})
    engine.sync(proxy.url, allow_http=True)
    older = next(p for path, s, p in proxy.seen if path == "/v1/revocations" and s == 200)
    held = json.loads((engine.state_dir / "crl.json").read_text())
    live_service.admin("POST", "/v1/admin/revoke", {"license_id": license_id, "reason": "x"})

    def flip(path, status, body):
        if path == "/v1/revocations":
            doc = body["revocations"]
            body["revocations"] = doc[:30] + ("B" if doc[30] == "A" else "A") + doc[31:]
        return status, body

    def strip(path, status, body):
        if path == "/v1/revocations":
            payload = _payload(body["revocations"])
            payload["revoked"] = [e for e in payload["revoked"] if e[0] != license_id]
            body["revocations"] = _with_payload(body["revocations"], payload)
        return status, body

    def replay(path, status, body):
        return (200, older) if path == "/v1/revocations" else (status, body)

    def future(path, status, body):
        if path == "/v1/revocations":
            return 200, {"revoked": [], "as_of": 2**53}  # the old, unsigned shape
        return status, body

    def future_signed(path, status, body):
        if path == "/v1/revocations":
            payload = _payload(body["revocations"]) | {"iat": 2**53}
            body["revocations"] = _with_payload(body["revocations"], payload)
        return status, body

    for rewrite, code in [
        (flip, "LIST_BAD_SIGNATURE"),
        (strip, "LIST_BAD_SIGNATURE"),
        (future, "LIST_BAD_SIGNATURE"),
        (future_signed, "LIST_BAD_SIGNATURE"),
    ]:
        proxy.rewrite = rewrite
        with pytest.raises(devices.LicenseError) as caught:
            engine.sync(proxy.url, allow_http=True)
        assert caught.value.code == code, rewrite.__name__
        assert json.loads((engine.state_dir / "crl.json").read_text()) == held
    # A replay of a genuine older list: first bring the device past it, then replay.
    proxy.rewrite = None
    assert engine.sync(proxy.url, allow_http=True)["revoked"] is True
    proxy.rewrite = replay
    older_seq = documents.parse_revocation_page(older["revocations"], key).seq
    newest = json.loads((engine.state_dir / "crl.json").read_text())
    assert older_seq < documents.parse_revocation_page(newest["document"], key).seq
    with pytest.raises(devices.LicenseError) as caught:
        engine.sync(proxy.url, allow_http=True)
    assert caught.value.code in ("LIST_STALE", "LIST_GAP")
    assert json.loads((engine.state_dir / "crl.json").read_text())["revoked"] == {
        license_id: newest["revoked"][license_id]
    }
    engine.close()
    restarted = devices.Engine(engine.state_dir, public_key=key, device_id="c1", clock=clock)
    with pytest.raises(devices.Revoked):
        restarted.start()
    restarted.close()


def test_forged_receipts_never_cost_a_record(live_service, proxy, customer, signing_key, tmp_path):
    _, engine, clock, _ = _camera(live_service, proxy, customer, signing_key, tmp_path, "c2")
    engine.count(inferences=40)
    clock.now = T0 + HOUR + 5
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
    usage = live_service.admin("GET", f"/v1/admin/usage/{engine.license_id}")
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
