"""The signed licence statuses a device holds (``state_dir/status.json``).

Whether a licence (or the key that signed it) is revoked is decided from one kind of
evidence: a licence status (:mod:`devices.documents`, ``SVCS1``) signed by the
authority, naming the licence and this device, bound to a sequence number of the
revocation list. The device fetches the status of the licence it holds at every sync
(``GET /v1/revocations/status``: a few hundred bytes whatever the list holds), keeps the
newest one per licence, and verifies every document again whenever it loads the file.
Nothing the device wrote itself (a flag, a list of ids) ever stands in for one.

A status is accepted only when it verifies under the engine's keyring, names the
licence asked for and this device, is newer than the one held (a later sequence number
or a later signing time) and is not signed beyond the clock leeway. A
revocation is never replaced by a status that does not say revoked. The newest status's
``(seq, iat)`` per licence is also written in ``state.json``, so replacing this file by
an older copy is noticed (analytics wait for a sync) unless both files are replaced.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .documents import LicenseStatus, parse_status
from .errors import BadSignature, Code, LicenseError
from .state import STATUS_FILE, read_json, write_json

FORMAT = 1
MAX_HELD = 16  # licences whose status a device keeps (the ones it has held lately)


class ListRejected(LicenseError):
    """A licence status (the revocation list's word) was refused; the one held is kept."""

    code = Code.LIST_REJECTED


def load(path: Path, keyring: Any, device_id: str) -> tuple[dict[str, LicenseStatus], str]:
    """The verified statuses in ``path`` for ``device_id``, newest per licence, and why
    the file could not be used ("" when it could). Never raises for a bad file: a
    document that does not verify, or is for another device, is skipped."""
    try:
        data = read_json(path, None)
    except LicenseError as exc:
        return {}, str(exc)
    if data is None:
        return {}, f"no licence status in {path.parent}"
    documents = data.get("statuses") if isinstance(data, dict) else None
    if not isinstance(documents, list):
        return {}, f"licence statuses in {path} have an unexpected shape"
    held: dict[str, LicenseStatus] = {}
    for text in documents[: MAX_HELD * 4]:
        try:
            status = parse_status(text, keyring)
        except LicenseError:
            continue
        if status.device_id == device_id and status.newer_than(held.get(status.license_id)):
            held[status.license_id] = status
    return held, ""


def to_json(held: Mapping[str, LicenseStatus]) -> dict[str, Any]:
    newest = sorted(held.values(), key=lambda s: (s.issued_at, s.license_id), reverse=True)
    return {"format": FORMAT, "statuses": [s.text for s in newest[:MAX_HELD]]}


def keep(held: Mapping[str, LicenseStatus], status: LicenseStatus) -> dict[str, LicenseStatus]:
    """``held`` with ``status`` in it, capped to the :data:`MAX_HELD` newest."""
    merged = {**held, status.license_id: status}
    newest = sorted(merged.values(), key=lambda s: s.issued_at, reverse=True)[:MAX_HELD]
    return {s.license_id: s for s in newest}


def accept(
    text: Any,
    keyring: Any,
    *,
    license_id: str,
    device_id: str,
    held: LicenseStatus | None,
    now: float,
    leeway: float,
) -> LicenseStatus | None:
    """The verified status ``text`` if it may replace ``held``; None when it verifies
    but is not newer than ``held``; ListRejected otherwise."""
    try:
        status = parse_status(text, keyring)
    except BadSignature as exc:
        raise ListRejected(f"licence status refused: {exc}", code=Code.LIST_BAD_SIGNATURE) from None
    except LicenseError as exc:
        raise ListRejected(f"licence status refused: {exc}", code=Code.LIST_BAD_SIGNATURE) from None
    if (status.license_id, status.device_id) != (license_id, device_id):
        raise ListRejected(
            f"licence status is for licence {status.license_id!r} on device "
            f"{status.device_id!r}, not {license_id!r} on {device_id!r}",
            code=Code.LIST_WRONG_LICENSE,
        )
    if status.issued_at > now + leeway:
        raise ListRejected(
            f"licence status is signed at {status.issued_at}, beyond this device's clock "
            f"({math.floor(now)}) plus {int(leeway)} s",
            code=Code.LIST_FROM_FUTURE,
        )
    if held is not None and (status.text == held.text or not status.newer_than(held)):
        # A replay of the status held, or an older one (another node of the service read
        # the list a moment earlier): valid, but it changes nothing. The caller reports
        # it as stale; it is never an error, as an honest service can answer so.
        return None
    return status


def revoked_keys(held: Iterable[LicenseStatus]) -> frozenset[str]:
    """Every signing key a held status names as revoked (a key revocation is final)."""
    keys: set[str] = set()
    for status in held:
        keys |= status.revoked_keys
    return frozenset(keys)


def floors_problem(
    held: Mapping[str, LicenseStatus], floors: Mapping[str, tuple[int, int]], license_id: str
) -> str:
    """Why the status held for ``license_id`` cannot be the newest one this device has
    seen ("" when it can): ``floors`` (from ``state.json``) remembers a later one."""
    floor = floors.get(license_id)
    status = held.get(license_id)
    if floor is None:
        return ""
    # Older: later on neither axis (sequence, signing time), and not the same position
    # (two statuses signed in one second differ by their sequence only).
    if status is None or (
        status.seq <= floor[0]
        and status.issued_at <= floor[1]
        and (status.seq, status.issued_at) != tuple(floor)
    ):
        return (
            f"the licence status held for {license_id} is older than one this device "
            f"held before (sequence {floor[0]}, signed {floor[1]})"
        )
    return ""


def provision(directory: Path, document: Any) -> None:
    """Store the signed status of an activation answer as it came; the engine verifies
    it when it loads (a missing or bad one means a sync before analytics)."""
    if isinstance(document, str):
        write_json(directory / STATUS_FILE, {"format": FORMAT, "statuses": [document]})
