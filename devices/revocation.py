"""The device's copy of the revocation list (``state_dir/crl.json``).

A device needs the list only for the licences it can run, so it keeps just those:
``checked`` (licence ids it has looked up in the list) and ``revoked`` (those of them the
list names), plus the latest signed page it verified. Memory and disk stay the same
whether the authority has ten revocations or a million; a sync walks the pages one at a
time (each well under a megabyte) and keeps nothing else from them.

Nothing here trusts the network: every page is an Ed25519-signed document
(:mod:`devices.documents`) and is refused, keeping the list held, when it is unsigned,
tampered, signed by another key, older than the held one, leaves a gap, or is dated
beyond the clock leeway. The stored page is verified again at every load, so an edited
or swapped file cannot move the list's sequence number or signing time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .documents import RevocationPage, parse_revocation_page
from .errors import BadSignature, LicenseError
from .state import read_json

FORMAT = 2
MAX_PAGES_PER_SYNC = 1000  # 10 million entries; a longer walk resumes at the next sync
MAX_CHECKED = 16  # licence ids a device keeps looking up (the ones it has held)


class ListRejected(LicenseError):
    """A revocation-list page was refused; the list held before is kept."""

    code = "LIST_REJECTED"


@dataclass(frozen=True)
class HeldList:
    seq: int
    issued_at: int
    document: str
    etag: str = ""
    checked: frozenset[str] = field(default_factory=frozenset)
    revoked: dict[str, int] = field(default_factory=dict)
    revoked_keys: frozenset[str] = field(default_factory=frozenset)

    def covers(self, license_id: str) -> bool:
        return license_id in self.checked

    def is_revoked(self, license_id: str) -> bool:
        return license_id in self.revoked

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "document": self.document,
            "etag": self.etag,
            "checked": sorted(self.checked),
            "revoked": dict(sorted(self.revoked.items())),
        }


def load(path: Path, public_key: Any) -> tuple[HeldList | None, str]:
    """The held list, or ``(None, why)`` when it is missing, damaged or does not verify
    under ``public_key``. Never raises for a bad file: the caller refuses analytics until
    a sync replaces it."""
    try:
        data = read_json(path, None)
    except LicenseError as exc:
        return None, str(exc)
    except OSError as exc:
        return None, f"revocation list {path} cannot be read: {exc.strerror or exc}"
    if data is None:
        return None, f"no revocation list in {path.parent}"
    checked, revoked, etag = (
        (data.get("checked"), data.get("revoked"), data.get("etag"))
        if isinstance(data, dict)
        else (None, None, None)
    )
    if not (
        data.get("format") == FORMAT
        and isinstance(checked, list)
        and all(isinstance(item, str) for item in checked)
        and isinstance(revoked, dict)
        and all(type(v) is int and v >= 0 for v in revoked.values())
        and isinstance(etag, str)
    ):
        return None, f"revocation list {path} has an unexpected shape"
    try:
        page = parse_revocation_page(data.get("document"), public_key)
    except LicenseError as exc:
        return None, f"revocation list {path} does not verify: {exc}"
    held = HeldList(
        seq=page.seq,
        issued_at=page.issued_at,
        document=page.text,
        etag=etag,
        checked=frozenset(checked),
        revoked=dict(revoked),
        revoked_keys=page.revoked_keys,
    )
    return held, ""


def first_list(document: str, public_key: Any, license_id: str) -> HeldList:
    """The list a device holds right after activation: the authority's signed head page
    from the activation answer, with the new licence looked up (the authority refuses to
    hand out a revoked licence, so at that sequence number it was not revoked)."""
    page = parse_revocation_page(document, public_key)
    return HeldList(
        seq=page.seq,
        issued_at=page.issued_at,
        document=page.text,
        checked=frozenset([license_id]),
        revoked_keys=page.revoked_keys,
    )


def apply_page(
    held: HeldList, page: RevocationPage, *, now: float, leeway: float, etag: str = ""
) -> HeldList:
    """``held`` advanced by ``page``, or ListRejected (``held`` unchanged)."""
    if page.seq < held.seq:
        raise ListRejected(
            f"revocation list page at sequence {page.seq} is older than the held {held.seq}",
            code="LIST_STALE",
        )
    if page.start > held.seq:
        raise ListRejected(
            f"revocation list page starts after {page.start}; this device holds {held.seq} "
            "(entries in between would be skipped)",
            code="LIST_GAP",
        )
    if page.issued_at > now + leeway:
        raise ListRejected(
            f"revocation list page is signed at {page.issued_at}, beyond this device's clock "
            f"({math.floor(now)}) plus {int(leeway)} s",
            code="LIST_FROM_FUTURE",
        )
    revoked = dict(held.revoked)
    for license_id, usable_until in page.revoked:
        if license_id in held.checked:
            revoked[license_id] = usable_until
    return replace(
        held,
        seq=page.seq,
        issued_at=max(held.issued_at, page.issued_at),
        document=page.text,
        etag=etag,
        revoked=revoked,
        revoked_keys=page.revoked_keys,
    )


def watching(held: HeldList | None, license_ids: Iterable[str]) -> frozenset[str]:
    """The licence ids a sync must look up: the wanted ones, then earlier ones, capped."""
    wanted = list(dict.fromkeys(license_ids))
    if held is not None:
        wanted += sorted(held.checked - set(wanted))
    return frozenset(wanted[:MAX_CHECKED])


Fetch = Callable[[int, str], "tuple[int, dict[str, Any], str]"]


def refresh(
    held: HeldList | None,
    license_ids: Iterable[str],
    fetch: Fetch,
    public_key: Any,
    *,
    now: float,
    leeway: float,
    save: Callable[[HeldList], None],
    learn: Callable[[Any], None] = lambda certificates: None,
) -> HeldList:
    """Bring the list up to the authority's head for ``license_ids``.

    When every wanted licence is already looked up, only the pages after the held
    sequence number are fetched (a 304 when nothing changed). A licence not looked up yet
    needs a walk from sequence 0; the walk keeps only the wanted ids, so its memory is
    one page, and it replaces the held list only when it has reached at least the held
    sequence number. ``fetch(since, if_none_match)`` returns ``(status, body, etag)``;
    ``learn`` receives each answer's key certificates before its page is verified.
    """
    checked = watching(held, license_ids)
    incremental = held is not None and checked <= held.checked
    if incremental:
        assert held is not None
        current = held
    else:
        current = HeldList(seq=0, issued_at=0, document="", checked=checked)
    for _ in range(MAX_PAGES_PER_SYNC):
        status, body, etag = fetch(current.seq, current.etag if incremental else "")
        if status == 304:
            break
        if status != 200:
            detail = body.get("detail") if isinstance(body.get("detail"), str) else ""
            raise LicenseError(
                f"revocation list unavailable: HTTP {status} {detail}".rstrip(),
                code="SYNC_FAILED",
            )
        learn(body.get("certificates"))
        try:
            page = parse_revocation_page(body.get("revocations"), public_key)
        except BadSignature as exc:
            raise ListRejected(
                f"revocation list refused: {exc}", code="LIST_BAD_SIGNATURE"
            ) from None
        current = apply_page(current, page, now=now, leeway=leeway, etag=etag)
        if incremental:
            save(current)  # each page is progress a crash must not undo
        if not page.more:
            break
    if not incremental:
        if held is not None and current.seq < held.seq:
            raise ListRejected(
                f"revocation list walk ended at sequence {current.seq}, older than the held "
                f"{held.seq}",
                code="LIST_STALE",
            )
        save(current)
    return current
