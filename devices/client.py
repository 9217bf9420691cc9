"""HTTP calls to the licensing service: activation, usage upload, revocation list, licence
refresh.

The only module that touches the network, and only when a caller asks (``activate`` and
``Engine.sync``); ``import devices`` does not load it. One attempt per call with a
timeout and no retry loop: the caller decides when to try again, so nothing blocks the
video path. Only ``https://`` is used unless the caller explicitly allows plain
``http://`` (tests, a lab bench): answers travel unencrypted there, and only the signed
parts of them (licences, list pages, receipts) are trusted anyway.

A timeout is a deadline for the whole call (:class:`Deadline`), not for each read: name
resolution, connect, TLS, sending, the status line, every header and the body all end
by it, so a peer that answers one byte at a time cannot hold a call longer. ``sync``
gives its requests one deadline between them.
"""

from __future__ import annotations

import http.client
import json
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import jsonsafe, status
from ._version import __version__
from .bounds import path_argument, shown
from .errors import BadSignature, Code, InvalidArgument, LicenseError
from .hardware import EXPLICIT, MAX_DEVICE_ID, fingerprint
from .identity import components_problem, read_components
from .state import (
    KEYS_FILE,
    STATE_FILE,
    TEMP_SUFFIX,
    TOKEN_FILE,
    atomic_write_bytes,
    write_json,
)
from .token import MAX_TOKEN_CHARS, decode_unverified
from .transport import Deadline, opener

DEFAULT_TIMEOUT = 10.0
# The largest answer read (after gzip): a revocation page of 10,000 entries is ~0.5 MiB.
MAX_RESPONSE_BYTES = 2 << 20

# Status -> code of the LicenseError raised when activation is refused (402, 403 below).
_ACTIVATION_CODES = {400: Code.BAD_REQUEST, 429: Code.RATE_LIMITED}
# Codes the service may name in a refusal's body (``"code"``), raised as they are; any
# other answer keeps the status's code above (a service that names none is older).
_SERVICE_CODES = frozenset({Code.TRIAL_USED})


def endpoint(base_url: str, path: str, *, allow_http: bool = False) -> str:
    """``base_url`` + ``path``, once ``base_url`` is a usable http(s) address: ``BAD_URL``
    when it is not, ``INSECURE_URL`` for ``http://`` unless ``allow_http`` is True."""
    if type(allow_http) is not bool:  # "no" is truthy: it must not allow plain http
        raise InvalidArgument(f"allow_http must be True or False, not {shown(allow_http)}")
    if not isinstance(base_url, str):
        raise LicenseError(
            f"service address must be a string, not {type(base_url).__name__}", code=Code.BAD_URL
        )
    if base_url.startswith("http://") and not allow_http:
        raise LicenseError(
            f"service address {base_url!r} is plain http; use https:// (or pass "
            "allow_http=True for a test or lab service)",
            code=Code.INSECURE_URL,
        )
    if not base_url.startswith(("http://", "https://")):
        raise LicenseError(f"service address {base_url!r} is not an http(s) URL", code=Code.BAD_URL)
    problem = _address_problem(base_url)
    if problem:
        raise LicenseError(f"service address {base_url!r} {problem}", code=Code.BAD_URL)
    return base_url.rstrip("/") + path


def _address_problem(base_url: str) -> str:
    """What would make urllib or http.client raise on ``base_url`` (an http(s) URL)
    rather than send a request; "" if nothing."""
    if not base_url.isprintable() or any(char.isspace() for char in base_url):
        return "holds white space or an unprintable character"
    try:
        parts = urllib.parse.urlsplit(base_url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
        host = parts.hostname or ""
        host.encode("idna")
    except ValueError as exc:  # UnicodeError included: a host name IDNA cannot encode
        return f"is not a usable URL ({exc})"
    if not host:
        return "names no host"
    if not base_url.replace(parts.netloc, "", 1).isascii():
        return "holds non-ASCII characters outside the host name"
    return ""


def _read(response: Any) -> bytes:
    raw = response.read(MAX_RESPONSE_BYTES + 1)
    if response.headers.get("Content-Encoding", "").lower() == "gzip":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            raw = inflater.decompress(raw, MAX_RESPONSE_BYTES + 1)
        except zlib.error:
            raise LicenseError("answer is not valid gzip", code=Code.BAD_RESPONSE) from None
    if len(raw) > MAX_RESPONSE_BYTES:
        raise LicenseError(
            f"answer is larger than {MAX_RESPONSE_BYTES} bytes", code=Code.BAD_RESPONSE
        )
    return raw


def call(
    method: str,
    url: str,
    *,
    body: Any = None,
    bearer: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float | Deadline = DEFAULT_TIMEOUT,
) -> tuple[int, dict[str, Any], Any]:
    """One HTTP exchange; returns ``(status, json_body, response_headers)`` for any HTTP
    answer (a 304 has an empty body) and raises ``LicenseError(code=Code.NETWORK_ERROR)``
    when there is none, or none complete by the deadline (``timeout``: seconds from now,
    or a :class:`Deadline` shared with other requests), ``REDIRECT_REFUSED`` for any
    other 3xx."""
    deadline = Deadline.after(timeout)
    sent = {
        "Accept": "application/json",
        "Accept-Encoding": "gzip",
        "User-Agent": f"svc-devices/{__version__}",
        **(headers or {}),
    }
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        sent["Content-Type"] = "application/json"
    if bearer:
        sent["Authorization"] = f"Bearer {bearer}"
    try:
        request = urllib.request.Request(url, data=data, headers=sent, method=method)  # noqa: S310
        status, raw, received = _exchange(request, deadline)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        if isinstance(reason, TimeoutError) or deadline.passed():
            raise LicenseError(
                f"no complete answer from the licensing service at {url} within the "
                f"{deadline.seconds:g} s timeout (a deadline for the whole call)",
                code=Code.NETWORK_ERROR,
            ) from None
        raise LicenseError(
            f"cannot reach the licensing service at {url}: {reason}", code=Code.NETWORK_ERROR
        ) from None
    if 300 <= status < 400 and status != 304:
        raise LicenseError(
            f"the licensing service at {url} answered {status}, a redirect, which is not "
            "followed (the request's credentials would go with it); configure the "
            "service's final https:// address",
            code=Code.REDIRECT_REFUSED,
        )
    try:
        payload = jsonsafe.loads(raw, max_bytes=MAX_RESPONSE_BYTES, what="answer") if raw else {}
    except jsonsafe.JSONRefused:
        payload = {}
    return status, payload if isinstance(payload, dict) else {}, received


def _exchange(request: urllib.request.Request, deadline: Deadline) -> tuple[int, bytes, Any]:
    """``(status, body, headers)`` of the answer to ``request``, an error status too; the
    body of either can fail to arrive whole (http.client.HTTPException, OSError), or
    not by the deadline (TimeoutError)."""
    try:
        with opener(deadline).open(request, timeout=deadline.remaining()) as response:
            return response.status, _read(response), response.headers
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, _read(exc) if exc.fp is not None else b"", exc.headers


def detail(status: int, payload: dict[str, Any]) -> str:
    text = payload.get("detail")
    return text if isinstance(text, str) and text else f"HTTP {status} without detail"


def activate(
    base_url: str,
    batch_token: str,
    state_dir: str | Path,
    *,
    device_id: str | None = None,
    timeout: float | Deadline = DEFAULT_TIMEOUT,
    allow_http: bool = False,
    components: Mapping[str, str] | None = None,
) -> str:
    """Exchange a batch key for this device's unit token (``POST /v1/activate``), store it
    in ``state_dir/license.token`` and return it.

    Every argument is checked before anything is sent, so a call that would fail
    afterwards takes no seat: InvalidArgument (``BAD_ARGUMENT``) for a wrong type or
    value (``timeout`` above 0 and at most a day), ``BAD_URL``, ``INSECURE_URL``,
    ``STATE_UNREADABLE`` when ``state_dir`` cannot be created, ``STATE_UNWRITABLE``
    when no file can be written in it. ``timeout`` bounds the whole call.

    Raises ``LicenseError`` with the service's ``detail``: code ``BATCH_EXHAUSTED`` on
    402, :class:`BadSignature` on 403 (forged, expired, revoked or unknown batch key),
    ``BAD_REQUEST`` on 400, ``RATE_LIMITED`` on 429, ``TRIAL_USED`` on 409 when this
    device already had its trial of the batch's SKU (on another trial batch),
    ``ACTIVATION_FAILED`` on any other status, ``NETWORK_ERROR`` when no complete answer
    arrives in time.

    ``components`` (issue 45, a contract addition): the hashed identity components
    (:func:`devices.identity.read_components`) sent with the request; default: read
    when ``device_id`` is read, none with an explicit ``device_id``.
    """
    deadline = Deadline.after(timeout)
    if not isinstance(batch_token, str):
        raise InvalidArgument(f"batch_token must be a string, not {type(batch_token).__name__}")
    if not 0 < len(batch_token.strip()) <= MAX_TOKEN_CHARS:
        raise InvalidArgument(
            f"batch_token must be a batch key of 1-{MAX_TOKEN_CHARS} characters, not "
            f"{len(batch_token.strip())}"
        )
    directory = path_argument(state_dir, "state_dir")
    if device_id is None:
        found = fingerprint()
        device_id, source, weak = found.value, found.source, found.weak
    elif not isinstance(device_id, str) or not 0 < len(device_id) <= MAX_DEVICE_ID:
        raise InvalidArgument(
            f"device_id must be a string of 1-{MAX_DEVICE_ID} characters or None, not "
            f"{shown(device_id)}"
        )
    else:
        source, weak = EXPLICIT, False
    if components is None and source != EXPLICIT:
        components = read_components()
    if isinstance(components, Mapping):
        components = dict(components)
    problem = "" if components is None else components_problem(components)
    if problem:
        raise InvalidArgument(f"components {problem}")
    url = endpoint(base_url, "/v1/activate", allow_http=allow_http)
    _check_writable(directory)
    body: dict[str, Any] = {
        "batch_token": batch_token.strip(),
        "device_id": device_id,
        "fingerprint_source": source,
        "weak_binding": weak,
        "sdk_version": __version__,
    }
    if components is not None:
        body["components"] = dict(components)
    status, payload, _ = call(
        "POST",
        url,
        body=body,
        timeout=deadline,
    )
    if status == 402:
        raise LicenseError(
            f"activation refused: {detail(status, payload)}", code=Code.BATCH_EXHAUSTED
        )
    if status == 403:
        raise BadSignature(f"activation refused: {detail(status, payload)}")
    if status != 200:
        named = payload.get("code")
        code = (
            named
            if status == 409 and isinstance(named, str) and named in _SERVICE_CODES
            else _ACTIVATION_CODES.get(status, Code.ACTIVATION_FAILED)
        )
        raise LicenseError(f"activation failed: {detail(status, payload)}", code=code)
    unit_token = payload.get("unit_token")
    if not isinstance(unit_token, str):
        raise LicenseError("activation answer carries no unit_token", code=Code.BAD_RESPONSE)
    try:
        claims = decode_unverified(unit_token)
    except BadSignature as exc:
        raise LicenseError(
            f"activation answer carries no readable unit_token ({exc})", code=Code.BAD_RESPONSE
        ) from None
    if claims["dev"] != device_id:
        raise LicenseError("activation answer is bound to another device", code=Code.BAD_RESPONSE)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _provision(directory, payload, unit_token)
    except OSError as exc:
        raise LicenseError(
            f"cannot store the licence in {directory}: {exc.strerror or exc}; the seat is "
            "taken, activate again once the directory is writable (it answers the same licence)",
            code=Code.STATE_UNREADABLE,
        ) from None
    return unit_token


def _check_writable(directory: Path) -> None:
    """Create ``directory`` and write (then remove) a file in it, before the service is
    asked for a seat: a seat taken for a device that cannot store its licence is lost
    until it activates again."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LicenseError(
            f"cannot create {directory}: {exc.strerror or exc}; nothing was sent",
            code=Code.STATE_UNREADABLE,
        ) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".activate.", suffix=TEMP_SUFFIX, dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise LicenseError(
            f"cannot write in {directory}: {exc.strerror or exc}; nothing was sent",
            code=Code.STATE_UNWRITABLE,
        ) from None


def _provision(directory: Path, payload: dict[str, Any], unit_token: str) -> None:
    """Store what a first boot needs to run without a further call: the token, the key
    certificates and the signed licence status of the answer (the engine verifies both
    when it loads) and, for a new licence only, an empty state. A re-activated licence
    keeps any state on disk; with none, the engine refuses analytics until a sync has
    restored its usage total."""
    certificates = payload.get("certificates")
    if isinstance(certificates, list) and all(isinstance(c, str) for c in certificates):
        # Kept as sent; the engine verifies each against its root keyring when it loads.
        write_json(directory / KEYS_FILE, {"format": 1, "certificates": certificates})
    status.provision(directory, payload.get("status"))
    if payload.get("reactivated") is False and not (directory / STATE_FILE).exists():
        write_json(directory / STATE_FILE, {"format": 1, "hwm": 0, "quota": {}, "open": None})
    atomic_write_bytes(directory / TOKEN_FILE, unit_token.encode("ascii") + b"\n")


def fetch_revocation_page(
    base_url: str,
    since: int,
    if_none_match: str = "",
    *,
    timeout: float | Deadline = DEFAULT_TIMEOUT,
    allow_http: bool = False,
) -> tuple[int, dict[str, Any], str]:
    """``GET /v1/revocations?since=N``: ``(status, body, etag)``; 304 when the held page
    (``if_none_match``) is still the head."""
    headers = {"If-None-Match": if_none_match} if if_none_match else {}
    url = endpoint(base_url, f"/v1/revocations?since={int(since)}", allow_http=allow_http)
    status, payload, received = call("GET", url, headers=headers, timeout=timeout)
    return status, payload, (received.get("ETag") or "") if received is not None else ""


def fetch_status(
    base_url: str,
    *,
    license_id: str,
    device_id: str,
    if_none_match: str = "",
    timeout: float | Deadline = DEFAULT_TIMEOUT,
    allow_http: bool = False,
) -> tuple[int, dict[str, Any]]:
    """``GET /v1/revocations/status?license_id=...&device_id=...``: ``(200, {status,
    license_id, revoked, seq, as_of, certificates})``; ``status`` is the signed document
    (``devices.documents``, SVCS1). ``if_none_match``: the ETag of the status held
    (:func:`devices.documents.status_etag`); ``(304, {})`` when it is still the current
    one, from the service or a cache in front of it."""
    query = urllib.parse.urlencode({"license_id": license_id, "device_id": device_id})
    headers = {"If-None-Match": if_none_match} if if_none_match else {}
    status, payload, _ = call(
        "GET",
        endpoint(base_url, f"/v1/revocations/status?{query}", allow_http=allow_http),
        headers=headers,
        timeout=timeout,
    )
    return status, payload


def upload_usage(
    base_url: str,
    *,
    unit_token: str,
    device_id: str,
    license_id: str,
    records: list[dict[str, int]],
    nonce: str,
    timeout: float | Deadline = DEFAULT_TIMEOUT,
    allow_http: bool = False,
) -> tuple[int, dict[str, Any]]:
    status, payload, _ = call(
        "POST",
        endpoint(base_url, "/v1/usage", allow_http=allow_http),
        body={"device_id": device_id, "license_id": license_id, "records": records, "nonce": nonce},
        bearer=unit_token,
        timeout=timeout,
    )
    return status, payload


def fetch_license(
    base_url: str,
    *,
    token: str,
    device_id: str,
    timeout: float | Deadline = DEFAULT_TIMEOUT,
    allow_http: bool = False,
    components: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """``GET /v1/license?device_id=...`` authenticated by the licence held: ``(200,
    {license_id, token, expires_at, certificates})`` when the service has a newer token
    for it (a renewal, or a rebinding to the ``components`` reported: issue 45),
    ``(304, {})`` when the held one is current."""
    fields = {"device_id": device_id}
    if components:
        fields["components"] = ",".join(f"{n}={d}" for n, d in sorted(components.items()))
    query = urllib.parse.urlencode(fields)
    status, payload, _ = call(
        "GET",
        endpoint(base_url, f"/v1/license?{query}", allow_http=allow_http),
        bearer=token,
        timeout=timeout,
    )
    return status, payload
