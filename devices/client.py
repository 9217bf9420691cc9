"""HTTP calls to the licensing service: activation, usage upload, revocation list.

The only module that touches the network, and only when a caller asks (``activate`` and
``Engine.sync``); everything else works offline. One attempt per call with a timeout and
no retry loop: the caller decides when to try again, so nothing blocks the video path.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ._version import __version__
from .errors import BadSignature, LicenseError
from .hardware import fingerprint
from .state import atomic_write_bytes
from .token import decode_unverified

DEFAULT_TIMEOUT = 10.0
MAX_RESPONSE_BYTES = 1 << 20
TOKEN_FILE = "license.token"  # noqa: S105 - a file name, not a secret

# Status -> code of the LicenseError raised when activation is refused (402, 403 below).
_ACTIVATION_CODES = {400: "BAD_REQUEST", 429: "RATE_LIMITED"}


def endpoint(base_url: str, path: str) -> str:
    if not base_url.startswith(("http://", "https://")):
        raise LicenseError(f"service address {base_url!r} is not an http(s) URL", code="BAD_URL")
    return base_url.rstrip("/") + path


def call(
    method: str,
    url: str,
    *,
    body: Any = None,
    bearer: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[int, dict[str, Any]]:
    """One HTTP exchange; returns ``(status, json_body)`` for any HTTP answer and
    raises ``LicenseError(code="NETWORK_ERROR")`` when there is none."""
    headers = {"Accept": "application/json", "User-Agent": f"svc-devices/{__version__}"}
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status, raw = response.status, response.read(MAX_RESPONSE_BYTES)
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read(MAX_RESPONSE_BYTES)
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise LicenseError(
            f"cannot reach the licensing service at {url}: {reason}", code="NETWORK_ERROR"
        ) from None
    try:
        payload = json.loads(raw.decode("utf-8")) if raw else {}
    except ValueError:
        payload = {}
    return status, payload if isinstance(payload, dict) else {}


def detail(status: int, payload: dict[str, Any]) -> str:
    text = payload.get("detail")
    return text if isinstance(text, str) and text else f"HTTP {status} without detail"


def activate(
    base_url: str,
    batch_token: str,
    state_dir: str | Path,
    *,
    device_id: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> str:
    """Exchange a batch key for this device's unit token (``POST /v1/activate``), store it
    in ``state_dir/license.token`` and return it.

    Raises ``LicenseError`` with the service's ``detail``: code ``BATCH_EXHAUSTED`` on
    402, :class:`BadSignature` on 403 (forged, expired, revoked or unknown batch key),
    ``NETWORK_ERROR`` when the service cannot be reached.
    """
    if device_id is None:
        found = fingerprint()
        device_id, source, weak = found.value, found.source, found.weak
    else:
        source, weak = "explicit", False
    status, payload = call(
        "POST",
        endpoint(base_url, "/v1/activate"),
        body={
            "batch_token": batch_token.strip(),
            "device_id": device_id,
            "fingerprint_source": source,
            "weak_binding": weak,
            "sdk_version": __version__,
        },
        timeout=timeout,
    )
    if status == 402:
        raise LicenseError(f"activation refused: {detail(status, payload)}", code="BATCH_EXHAUSTED")
    if status == 403:
        raise BadSignature(f"activation refused: {detail(status, payload)}")
    if status != 200:
        code = _ACTIVATION_CODES.get(status, "ACTIVATION_FAILED")
        raise LicenseError(f"activation failed: {detail(status, payload)}", code=code)
    unit_token = payload.get("unit_token")
    if not isinstance(unit_token, str):
        raise LicenseError("activation answer carries no unit_token", code="BAD_RESPONSE")
    if decode_unverified(unit_token)["dev"] != device_id:
        raise LicenseError("activation answer is bound to another device", code="BAD_RESPONSE")
    directory = Path(state_dir)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(directory / TOKEN_FILE, unit_token.encode("ascii") + b"\n")
    return unit_token


def fetch_revocations(base_url: str, *, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """The service's revocation list ``{revoked: [licence ids], as_of}``."""
    status, payload = call("GET", endpoint(base_url, "/v1/revocations"), timeout=timeout)
    revoked, as_of = payload.get("revoked"), payload.get("as_of")
    if status != 200:
        raise LicenseError(
            f"revocation list unavailable: {detail(status, payload)}", code="SYNC_FAILED"
        )
    if not (
        isinstance(revoked, list)
        and all(isinstance(item, str) for item in revoked)
        and type(as_of) is int
    ):
        raise LicenseError("revocation list has an unexpected shape", code="BAD_RESPONSE")
    return {"revoked": revoked, "as_of": as_of}


def upload_usage(
    base_url: str,
    *,
    unit_token: str,
    device_id: str,
    license_id: str,
    records: list[dict[str, int]],
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[int, dict[str, Any]]:
    return call(
        "POST",
        endpoint(base_url, "/v1/usage"),
        body={"device_id": device_id, "license_id": license_id, "records": records},
        bearer=unit_token,
        timeout=timeout,
    )
