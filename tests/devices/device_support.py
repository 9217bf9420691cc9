"""Helpers shared by the device-module tests (plain functions and classes; the fixtures
that use them live in conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from devices import documents
from svccore import authority

LICENSE = "LIC-0123456789"

NOW = 1_750_000_000  # a fixed instant well inside every test licence's term
DEVICE = "cam-0001"


class FakeClock:
    """Injected engine clock; tests move it explicitly."""

    def __init__(self, now: float = NOW) -> None:
        self.now = float(now)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def claims_for(**overrides: Any) -> dict[str, Any]:
    """Claims of a unit licence bound to DEVICE, valid at NOW; keyword overrides."""
    claims: dict[str, Any] = {
        "lic": LICENSE,
        "sku": "VISION-PRO",
        "sub": "CUST-0123456789",
        "iss": "svc-licensing",
        "dev": DEVICE,
        "ent": {"detect": True, "defect": True, "ppe": True, "anpr": False},
        "lim": {"max_streams": 2, "max_fps": 15, "api_calls": 0},
        "iat": NOW - 86400,
        "nbf": NOW - 86400,
        "exp": NOW + 30 * 86400,
        "grace_days": 14,
        "act": "optional",
    }
    claims.update(overrides)
    return claims


def signed_page(
    key: Any,
    *,
    start: int = 0,
    seq: int = 0,
    issued_at: int = NOW - 60,
    more: bool = False,
    revoked: list | None = None,
    keys_revoked: list[str] | None = None,
) -> str:
    payload = authority.revocation_page_payload(
        issuer="svc-test",
        start=start,
        seq=seq,
        issued_at=issued_at,
        more=more,
        revoked=[list(entry) for entry in revoked or []],
        keys_revoked=keys_revoked,
    )
    return authority.sign_document(documents.LIST_PREFIX, payload, key)


def signed_status(
    key: Any,
    *,
    license_id: str = LICENSE,
    device_id: str = DEVICE,
    revoked_at: int = 0,
    seq: int = 0,
    issued_at: int = NOW - 60,
    keys_revoked: list[str] | None = None,
    lease_end: int = 0,
    suspended: bool = False,
) -> str:
    payload = authority.status_payload(
        issuer="svc-test",
        license_id=license_id,
        device_id=device_id,
        revoked_at=revoked_at,
        seq=seq,
        issued_at=issued_at,
        keys_revoked=keys_revoked,
        lease_end=lease_end,
        suspended=suspended,
    )
    return authority.sign_document(documents.STATUS_PREFIX, payload, key)


def provision(
    state_dir: Path, key: Any, *, license_id: str = LICENSE, seq: int = 0, device_id: str = DEVICE
) -> None:
    """What ``devices.activate`` leaves behind for a new licence: its signed status (not
    revoked) and an empty state."""
    state_dir.mkdir(parents=True, exist_ok=True)
    status = signed_status(key, license_id=license_id, device_id=device_id, seq=seq)
    (state_dir / "status.json").write_text(json.dumps({"format": 1, "statuses": [status]}))
    (state_dir / "state.json").write_text('{"format": 1, "hwm": 0, "quota": {}, "open": null}')


Answer = Callable[[dict[str, Any]], tuple[int, Any]]


class FakeService:
    """A scripted licensing service that signs like the real one: revocation-list pages
    from ``revoked`` (entry i has sequence number i + 1) and usage receipts covering every
    uploaded record. Routes can be replaced per test; every request is recorded."""

    def __init__(self, key: Any) -> None:
        self.key = key
        self.routes: dict[tuple[str, str], Answer] = {}
        self.requests: list[dict[str, Any]] = []
        self.url = ""
        self.revoked: list[tuple[str, int]] = []
        self.now = NOW
        self.usage_total = 0
        self.page_size = documents.LIST_PAGE_ENTRIES
        self.certificates: list[str] = []  # key certificates sent with every answer
        self.keys_revoked: list[str] = []
        self.lease_seconds = 0  # a check-in lease on every status (0: none)
        self.suspended = False
        self.on("GET", "/v1/revocations", self.revocations)
        self.on("GET", "/v1/revocations/status", self.status)
        self.on("POST", "/v1/usage", self.accept)
        # The held licence is current unless a test renews it (reply with a token).
        self.reply("GET", "/v1/license", 304, None)

    def on(self, method: str, path: str, answer: Answer) -> None:
        self.routes[(method, path)] = answer

    def reply(self, method: str, path: str, status: int, body: Any) -> None:
        self.on(method, path, lambda request: (status, body))

    def calls(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]

    def route(self, method: str, target: str) -> tuple[Answer | None, dict[str, list[str]]]:
        parts = urlsplit(target)
        return self.routes.get((method, parts.path)), parse_qs(parts.query)

    # -- the signed answers -------------------------------------------------------------

    def page(self, since: int) -> str:
        head = len(self.revoked)
        rows = self.revoked[since : since + self.page_size]
        seq = since + len(rows)
        return signed_page(
            self.key,
            start=since,
            seq=seq,
            issued_at=self.now,
            more=seq < head,
            revoked=rows,
            keys_revoked=self.keys_revoked,
        )

    def revocations(self, request: dict[str, Any]) -> tuple[int, Any]:
        since = int(request["query"].get("since", ["0"])[0])
        etag = f'"{len(self.revoked)}"'
        if since == len(self.revoked) and request["headers"].get("If-None-Match") == etag:
            return 304, None
        page = self.page(since)
        seq = documents.parse_revocation_page(page, self.key.public_key()).seq
        body = {"revocations": page, "seq": seq, "certificates": self.certificates}
        return 200, body, {"ETag": f'"{seq}"'}

    def status_document(self, license_id: str, device_id: str) -> str:
        """The signed status of ``license_id`` at the list's head (``revoked`` entry i
        has sequence number i + 1; revoked at that entry's sequence number as a time)."""
        numbers = [i + 1 for i, (lic, _) in enumerate(self.revoked) if lic == license_id]
        return signed_status(
            self.key,
            license_id=license_id,
            device_id=device_id,
            revoked_at=self.now - 10 if numbers else 0,
            seq=len(self.revoked),
            issued_at=self.now,
            keys_revoked=self.keys_revoked,
            lease_end=self.now + self.lease_seconds if self.lease_seconds else 0,
            suspended=self.suspended,
        )

    def status(self, request: dict[str, Any]) -> tuple[int, Any]:
        license_id = request["query"].get("license_id", [""])[0]
        device_id = request["query"].get("device_id", [""])[0]
        document = self.status_document(license_id, device_id)
        return 200, {"status": document, "certificates": self.certificates}

    def receipt(
        self,
        request: dict[str, Any],
        records: list | None = None,
        *,
        held: dict[tuple[int, int], tuple[int, int, int, int]] | None = None,
        refused: list | None = None,
    ) -> str:
        """A receipt for the upload ``request``: it holds ``records`` (keys; default
        every record uploaded) with the counts sent, or those in ``held`` for a key
        there (a conflict), and names ``refused``."""
        body = request["json"]
        sent = {
            (r["period_start"], r["period_end"]): (
                r["inferences"], r["frames"], r["stream_seconds"], r["events"],
            )
            for r in reversed(body["records"])
        }  # fmt: skip
        keys = sorted(set(sent if records is None else records))
        counts = {**sent, **(held or {})}
        payload = authority.receipt_payload(
            issuer="svc-test",
            device_id=body["device_id"],
            license_id=LICENSE,
            nonce=body.get("nonce", ""),
            issued_at=self.now,
            records=[(*key, *counts.get(key, (0, 0, 0, 0))) for key in keys],
            refused=sorted(refused or []),
            inferences=self.usage_total,
        )
        return authority.sign_document(documents.RECEIPT_PREFIX, payload, self.key)

    def accept(self, request: dict[str, Any]) -> tuple[int, Any]:
        records = request["json"]["records"]
        self.usage_total += sum(r["inferences"] for r in records)
        receipt = self.receipt(request)
        return 200, {
            "accepted": len(records),
            "duplicates": 0,
            "receipt": receipt,
            "certificates": self.certificates,
        }


HOUR = 3600
PERIOD = NOW // HOUR * HOUR  # the hour NOW is in
METERED = {"max_streams": 1, "max_fps": 30, "api_calls": 1_000_000}


def sync(engine, service):
    """``engine.sync`` against the stand-in service (plain HTTP on loopback)."""
    return engine.sync(service.url, allow_http=True)
