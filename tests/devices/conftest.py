"""Fixtures for the device module: temporary keys, a token factory, an injected clock,
and a tiny stand-in for the licensing service (stdlib http.server on 127.0.0.1:0).

The device module is pure Python; nothing here needs Django or a database.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from devices import Engine
from devices.token import public_key_b64url
from svccore.authority import encode_token
from tests.devices.device_support import (
    DEVICE,
    METERED,
    FakeClock,
    FakeService,
    claims_for,
    provision,
)


@pytest.fixture
def signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def public_key(signing_key: Ed25519PrivateKey) -> str:
    return public_key_b64url(signing_key.public_key())


@pytest.fixture
def make_token(signing_key: Ed25519PrivateKey) -> Callable[..., str]:
    """``make_token(exp=..., lim={...})``: a unit token for DEVICE signed by the test key."""

    def make(*, key: Ed25519PrivateKey | None = None, **overrides: Any) -> str:
        return encode_token(claims_for(**overrides), key or signing_key)

    return make


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state_dir(tmp_path: Path, signing_key: Ed25519PrivateKey) -> Path:
    """A device's state directory as activation leaves it (list head, empty state)."""
    path = tmp_path / "state"
    provision(path, signing_key)
    return path


@pytest.fixture
def make_engine(state_dir: Path, public_key: str, clock: FakeClock) -> Iterator[Callable]:
    """A new Engine on the same state dir each call: calling it twice is a reboot (the
    earlier engine's process is taken to have died, so its directory lock is gone)."""
    engines: list[Engine] = []

    def make(**kwargs: Any) -> Engine:
        kwargs.setdefault("public_key", public_key)
        kwargs.setdefault("device_id", DEVICE)
        kwargs.setdefault("clock", clock)
        for earlier in engines:
            earlier._dir_lock.release()
        engines.append(Engine(state_dir, **kwargs))
        return engines[-1]

    yield make
    for engine in engines:
        engine._dir_lock.release()


@pytest.fixture
def service(signing_key: Ed25519PrivateKey) -> Iterator[FakeService]:
    fake = FakeService(signing_key)

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            answer, query = fake.route(self.command, self.path)
            request = {
                "method": self.command,
                "path": self.path.split("?")[0],
                "query": query,
                "headers": dict(self.headers),
                "json": json.loads(raw) if raw else None,
            }
            fake.requests.append(request)
            status, body, *extra = answer(request) if answer else (404, {"detail": "Not found."})
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            for name, value in (extra[0] if extra else {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _handle  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def token(make_token, state_dir) -> str:
    """A metered licence (METERED), also on disk, as activation leaves it."""
    text = make_token(lim=METERED)
    (state_dir / "license.token").write_text(text + "\n")
    return text


@pytest.fixture
def running(make_engine, token) -> Engine:
    """An engine started on :func:`token`."""
    engine = make_engine()
    assert engine.start(token) == "active"
    return engine
