"""A webhook receiver for the tests: a real HTTP server on loopback that verifies every
delivery with the ``standardwebhooks`` package (as a customer's receiver would) and
answers as the test tells it (fail the first N, be slow, be down)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook as Verifier
from standardwebhooks.webhooks import WebhookVerificationError


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: dict
    verified: bool


@dataclass
class Receiver:
    secrets: list[str] = field(default_factory=list)
    fail_first: int = 0
    delay: float = 0.0
    status: int = 200
    deliveries: list[Delivery] = field(default_factory=list)
    requests: int = 0
    inflight: dict[str, int] = field(default_factory=dict)  # path -> requests in flight
    most_inflight: int = 0  # the most in flight at once to one path
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return self.url_for("svc")

    def url_for(self, name: str) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hooks/{name}?tenant=1"

    def accepted(self) -> list[Delivery]:
        with self.lock:
            return [d for d in self.deliveries if d.verified]

    def verify(self, raw: bytes, headers: dict[str, str]) -> bool:
        for secret in self.secrets:
            try:
                Verifier(secret).verify(raw, headers)
                return True
            except WebhookVerificationError:
                continue
        return False

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server name
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    receiver.requests += 1
                    failing = receiver.requests <= receiver.fail_first
                    now_in = receiver.inflight.get(self.path, 0) + 1
                    receiver.inflight[self.path] = now_in
                    receiver.most_inflight = max(receiver.most_inflight, now_in)
                try:
                    status, body = self._answer(raw, headers, failing)
                finally:
                    # Out of flight before the answer is written: the worker may send
                    # the next delivery as soon as it reads this one's status, possibly
                    # before this thread would run again.
                    with receiver.lock:
                        receiver.inflight[self.path] -= 1
                self.send_response(status)
                self.end_headers()
                self.wfile.write(body)

            def _answer(self, raw: bytes, headers: dict[str, str], failing: bool):
                """The status and body to answer with."""
                if receiver.delay:
                    time.sleep(receiver.delay)
                if failing or receiver.status >= 300:
                    down = b"receiver is down for maintenance"
                    return (500 if failing else receiver.status), down
                verified = receiver.verify(raw, headers)
                with receiver.lock:
                    receiver.deliveries.append(
                        Delivery(self.path, headers, json.loads(raw), verified)
                    )
                return (204 if verified else 401), b""

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
