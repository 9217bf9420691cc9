"""The revocation list as devices fetch it: signed incremental pages
(``GET /v1/revocations?since=N``, ``devices.documents`` format ``SVCR1``) and the legacy
full list of older firmware.

Every answer is built once per change of the list, never per request. The list's head
(one single-row read) is part of the cache key, together with the signing-key
fingerprint, the head's epoch and its keys version, so a revocation moves every reader
to fresh keys, a new key (``keygen --force``) never serves documents signed by the old
one, a key install, retirement or revocation never serves stale certificates, and
caches in different processes can never disagree. The cached bytes (plain and gzip,
compressed once when built) expire after ``CACHE_SECONDS`` so that pruning catches up.
Each process also holds the answers it served last (:data:`HELD_ANSWERS`), so a request
for a page it holds costs the head read and nothing else.

Every answer carries ``certificates``: the key certificates of the authority's keys
that are not revoked (devices verify each against their compiled-in roots), and every
signed page names the revoked signing keys (``keys_revoked``).

A device module asks instead for the signed status of the one licence it holds
(:func:`license_status`, ``GET /v1/revocations/status``): a few hundred bytes whatever
the list holds, signed once per window or change of what it says and stored
(:mod:`licensing.status_store`, issue 46), served with an ETag and a max-age a cache
honours.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import OuterRef, Q, QuerySet, Subquery

from config import sharedcache
from config.clock import now
from config.errors import Conflict
from devices.documents import LIST_PAGE_ENTRIES, LIST_PREFIX, STATUS_PREFIX
from licensing import leases
from licensing.models import License, Revocation, RevocationHead
from licensing.selectors import signing_keys_published
from signing import keyring
from svccore.authority import revocation_page_payload, status_payload
from svccore.timeunits import unix

# Read at call time (not bound as a default), so a test can make pages small.
PAGE_ENTRIES = LIST_PAGE_ENTRIES
CACHE_SECONDS = 3600
GZIP_LEVEL = 6
HEAD_SQL = "SELECT seq, epoch, keys_version FROM licensing_revocationhead WHERE id = 1"
HELD_ANSWERS = 32  # answers each process keeps in memory, besides the shared cache
# Answers built by this process: a test asserts that a repeated request builds nothing.
BUILDS = 0
SIGNATURES = 0  # licence statuses signed by this process (tests, bench)
_held: OrderedDict[str, Answer] = OrderedDict()
_head_held: list[tuple[float, Head]] = []  # (time.monotonic() read at, head)
_head_document: list[tuple[Answer, str]] = []  # the head page and its document
_published: list[tuple[tuple[str, str, int], tuple[list[str], list[str]]]] = []
_held_lock = threading.Lock()


@dataclass(frozen=True)
class Head:
    seq: int
    epoch: str
    keys: int = 0  # the keys version: moves with every signing-key change


@dataclass(frozen=True)
class Answer:
    """A built answer in one content coding: the ETag it carries and its bytes."""

    etag: str
    body: bytes
    built_at: float = 0.0  # Unix time


def head_get() -> Head:
    """The list's last sequence number (0 before the first revocation).

    Every request makes this read, often as its only work (a 304), so it is plain SQL:
    compiling the ORM query would cost more than running it. A head this process read
    less than ``SVC_LIST_HEAD_SECONDS`` ago (default 1 s) is reused, so the list is a
    read of memory while devices poll it; a change made here is seen at once
    (:func:`head_forget`), one made by another process within that time. A licence
    status never reuses it (:func:`_head_and_revocation`)."""
    reuse = settings.SVC_LIST_HEAD_SECONDS
    held = _head_held[0] if _head_held else None
    if held is not None and time.monotonic() - held[0] < reuse:
        return held[1]
    with connection.cursor() as cursor:
        cursor.execute(HEAD_SQL)
        row = cursor.fetchone()
    head = Head(seq=0, epoch="", keys=0) if row is None else Head(*row)
    _head_held[:] = [(time.monotonic(), head)]
    return head


def head_forget() -> None:
    """Read the head again next time: the list changed in this process."""
    _head_held.clear()


def page_etag(head: Head, seq: int | None = None) -> str:
    """ETag of the page ending at ``seq`` (default: the head) under ``head``'s keys."""
    end = head.seq if seq is None else seq
    return f'"{keyring.public_key_fingerprint()[:16]}-{end}-k{head.keys}"'


def full_etag(head: Head) -> str:
    return f'"{keyring.public_key_fingerprint()[:16]}-full-{head.seq}-k{head.keys}"'


def _cache_key(kind: str, since: int | str, head: Head) -> str:
    return (
        f"revocations:{keyring.public_key_fingerprint()}:{head.epoch}:k{head.keys}:{kind}:"
        f"{since}:{head.seq}"
    )


def _cached(key: str, build: Callable[[], tuple[str, dict[str, Any]]], *, zipped: bool) -> Answer:
    """The answer under ``key`` in the coding asked for; when absent, build it once and
    cache both codings, apart, so a request fetches only the bytes it sends."""
    name = f"{key}:{'gzip' if zipped else 'plain'}"
    answer = _held.get(name)
    if answer is not None and now().timestamp() - answer.built_at < CACHE_SECONDS:
        return answer
    answer = sharedcache.get(name)
    if answer is None:
        global BUILDS
        etag, body = build()
        plain = json.dumps(body, separators=(",", ":")).encode()
        built_at = now().timestamp()
        both = {
            f"{key}:plain": Answer(etag, plain, built_at),
            f"{key}:gzip": Answer(etag, gzip.compress(plain, GZIP_LEVEL, mtime=0), built_at),
        }
        BUILDS += 1
        sharedcache.set_many(both, CACHE_SECONDS)
        answer = both[name]
    with _held_lock:
        _held[name] = answer
        while len(_held) > HELD_ANSWERS:
            _held.popitem(last=False)
    return answer


def answers_forget() -> None:
    """Drop every answer this process holds and the shared cache's too (tests; an
    operator who must have every page rebuilt at once)."""
    with _held_lock:
        _held.clear()
    _published.clear()
    head_forget()
    sharedcache.clear()


def _listed(head: Head, issued_at: int) -> QuerySet[Revocation]:
    """Entries numbered up to the head that still matter at ``issued_at``: an entry whose
    licence could not run anyway (expiry + grace passed) drops out; perpetual ones stay.
    Bounded by the head read, so the answer is exactly the one its cache key names even
    when revocations commit while it is being built."""
    return Revocation.objects.filter(
        Q(usable_until=0) | Q(usable_until__gt=issued_at), seq__lte=head.seq
    ).order_by("seq")


def _page_document(
    *, since: int, head: Head, issued_at: int, keys_revoked: list[str]
) -> tuple[str, int, bool]:
    """The signed page continuing a list held at ``since``: (document, seq, more)."""
    size = PAGE_ENTRIES
    rows = list(
        _listed(head, issued_at)
        .filter(seq__gt=since)
        .values_list("seq", "license_id", "usable_until")[: size + 1]
    )
    more = len(rows) > size
    # A full page ends at its last entry; the last page ends at the head, so a device
    # that has read it holds the whole list even when pruned entries trail the head.
    seq = rows[size - 1][0] if more else head.seq
    payload = revocation_page_payload(
        issuer=settings.SVC_ISSUER,
        start=since,
        seq=seq,
        issued_at=issued_at,
        more=more,
        revoked=[[license_id, until] for _, license_id, until in rows[:size]],
        keys_revoked=keys_revoked,
    )
    return keyring.sign_document(LIST_PREFIX, payload), seq, more


def revocation_page(*, since: int, head: Head, zipped: bool = False) -> Answer:
    """The answer to ``?since=N``: ``{revocations, seq, more, as_of}``; Conflict when the
    device holds a sequence number this list never reached."""
    if since > head.seq:
        raise Conflict(
            f"revocation list is at sequence {head.seq}; the device holds {since}, a number "
            "this list never reached; fetch it again with since=0"
        )

    def build() -> tuple[str, dict[str, Any]]:
        issued_at = int(now().timestamp())
        certificates, keys_revoked = _keys_published(head)
        document, seq, more = _page_document(
            since=since, head=head, issued_at=issued_at, keys_revoked=keys_revoked
        )
        body = {
            "revocations": document,
            "seq": seq,
            "more": more,
            "as_of": issued_at,
            "certificates": certificates,
        }
        return page_etag(head, seq), body

    return _cached(_cache_key("page", since, head), build, zipped=zipped)


def revocation_full(*, head: Head, zipped: bool = False) -> Answer:
    """The answer of older firmware (no ``since``): every listed licence id in sequence
    order, plus the signed first page so a device can move to incremental fetching."""

    def build() -> tuple[str, dict[str, Any]]:
        issued_at = int(now().timestamp())
        certificates, keys_revoked = _keys_published(head)
        revoked = list(_listed(head, issued_at).values_list("license_id", flat=True))
        document, _, _ = _page_document(
            since=0, head=head, issued_at=issued_at, keys_revoked=keys_revoked
        )
        body = {
            "revoked": revoked,
            "as_of": issued_at,
            "seq": head.seq,
            "revocations": document,
            "certificates": certificates,
        }
        return full_etag(head), body

    return _cached(_cache_key("full", "", head), build, zipped=zipped)


def head_document(head: Head | None = None) -> str:
    """The signed, empty page at ``head`` (default: read the head now; ``from`` = ``seq``
    = H): handed out with a licence so a freshly activated device holds a verified list
    position."""
    head = head_get() if head is None else head
    answer = revocation_page(since=head.seq, head=head)
    held = _head_document[0] if _head_document else None
    if held is not None and held[0] is answer:
        return held[1]
    document = json.loads(answer.body)["revocations"]
    _head_document[:] = [(answer, document)]
    return document


@dataclass(frozen=True)
class ListPosition:
    """What a device is handed with its licence so that it holds a verified list position
    without a second call: the signed, empty page at the list's head (SVCR1), the
    licence's signed status at that head (SVCS1) and the authority's key certificates."""

    revocations: str
    status: str
    certificates: list[str]


def list_position(
    *,
    license_id: str,
    device_id: str,
    terms: leases.LeaseAndHold | None = None,
    check_in: bool = False,
) -> ListPosition:
    """The list position handed out with ``license_id``, a licence the caller knows is
    not revoked (a new one, or one activation found unrevoked). It reads the head, the
    cache and the key registry and signs: activation builds it before it takes a seat,
    so that nothing after the commit can fail the answer."""
    head = head_get()
    status = license_status(
        license_id=license_id,
        device_id=device_id,
        head=head,
        unrevoked=True,
        terms=terms,
        check_in=check_in,
    )
    return ListPosition(
        revocations=head_document(head),
        status=status["status"],
        certificates=keyring.certificates(),
    )


def _keys_published(head: Head) -> tuple[list[str], list[str]]:
    """:func:`signing_keys_published`, read once per keys version of the head (every
    signing-key change moves it) and signing key of this process."""
    key = (keyring.public_key_fingerprint(), head.epoch, head.keys)
    held = _published[0] if _published else None
    if held is not None and held[0] == key:
        return held[1]
    published = signing_keys_published()
    _published[:] = [(key, published)]
    return published


def _head_and_revocation(
    license_id: str, also: dict[str, Any] | None = None
) -> tuple[Head, Any, leases.LeaseAndHold, tuple | None]:
    """The list's head read now (and kept, as :func:`head_get` keeps it), the time
    ``license_id`` was revoked as of that head (None: not revoked) and its lease and
    hold (:mod:`licensing.leases`), in one query, with the values of the expressions
    ``also`` (None when there is no head row to read them with). Reads
    are then ordered as time is: no status hands out a head older than one any node
    handed out before it was asked for, so a device never meets its list going back
    between two nodes, and a revocation is in every status from its commit on."""
    also = also or {}
    revoked = Revocation.objects.filter(license_id=license_id, seq__lte=OuterRef("seq"))
    row = (
        RevocationHead.objects.filter(pk=1)
        .annotate(
            revoked_at=Subquery(revoked.values("revoked_at")[:1]),
            **leases.status_expressions(license_id),
            **also,
        )
        .values_list("seq", "epoch", "keys_version", "revoked_at", *leases.STATUS_FIELDS, *also)
        .first()
    )
    extra = None
    if row is None:
        head, revoked_at = Head(seq=0, epoch="", keys=0), None
        terms = leases.lease_and_hold(license_id=license_id)
    else:
        head, revoked_at = Head(*row[:3]), row[3]
        ends = 4 + len(leases.STATUS_FIELDS)
        terms = leases.from_values(*row[4:ends])
        extra = tuple(row[ends:])
    _head_held[:] = [(time.monotonic(), head)]
    return head, revoked_at, terms, extra


def status_inputs(
    license_id: str, also: dict[str, Any] | None = None
) -> tuple[Head, int, leases.LeaseAndHold, tuple | None]:
    """What a status of ``license_id`` says besides the time, read now in one query:
    the list's head, the licence's revocation time as of it (Unix seconds, 0: not
    revoked), its lease and hold, and the values of the expressions ``also``, read with
    them (:func:`_head_and_revocation`)."""
    head, row, terms, extra = _head_and_revocation(license_id, also)
    return head, (max(unix(row), 1) if row is not None else 0), terms, extra


def license_status(
    *,
    license_id: str,
    device_id: str,
    head: Head | None = None,
    unrevoked: bool = False,
    batch_id: str | None = None,
    check_in: bool = False,
    terms: leases.LeaseAndHold | None = None,
) -> dict[str, Any]:
    """The signed status (``SVCS1``) of ``license_id`` for ``device_id`` at the list's
    head: revoked when a revocation numbered up to the head names it, pruned entries
    included; the signing keys revoked as of then. One indexed read of the licence's
    revocation (the head and the keys are held in memory) and one signature;
    ``unrevoked`` skips the read for a licence the caller has just found not revoked
    (activation refuses a revoked unit).

    A licence id this authority never listed is simply not revoked: the status says what
    the list says. Without ``head``, the head is read now, with the licence's revocation
    in the same query (:func:`_head_and_revocation`): statuses never go back in time.

    The status carries the licence's check-in lease end and hold (issue 42,
    :mod:`licensing.leases`; ``batch_id`` for a unit not written yet, ``terms`` when
    the caller read them already). ``check_in``
    (a device's sync) records the hand-out as the unit's last check-in when a lease
    applies and the status is for the licence's own device."""
    revoked_at = 0  # 0 means "not revoked"
    if head is None:
        head, revoked_at, found, _ = status_inputs(license_id)
        terms = terms or found
    elif not unrevoked:
        row = (
            Revocation.objects.filter(license_id=license_id, seq__lte=head.seq)
            .values_list("revoked_at", flat=True)
            .first()
        )
        revoked_at = max(unix(row), 1) if row is not None else 0
    if terms is None:
        terms = leases.lease_and_hold(license_id=license_id, batch_id=batch_id)
    return status_signed(
        license_id=license_id,
        device_id=device_id,
        head=head,
        revoked_at=revoked_at,
        terms=terms,
        check_in=check_in,
    )


def status_signed(
    *,
    license_id: str,
    device_id: str,
    head: Head,
    revoked_at: int,
    terms: leases.LeaseAndHold,
    check_in: bool = False,
) -> dict[str, Any]:
    """Sign the status of ``license_id`` for ``device_id`` from inputs already read
    (:func:`license_status`, :mod:`licensing.status_store`): the answer's fields."""
    global SIGNATURES
    certificates, keys_revoked = _keys_published(head)
    moment = now()
    issued_at = int(moment.timestamp())
    lease_end = terms.lease_end(issued_at)
    if check_in and lease_end:
        License.objects.filter(pk=license_id, device_id=device_id).update(checked_in_at=moment)
    payload = status_payload(
        issuer=settings.SVC_ISSUER,
        license_id=license_id,
        device_id=device_id,
        revoked_at=revoked_at,
        seq=head.seq,
        issued_at=issued_at,
        keys_revoked=keys_revoked,
        lease_end=lease_end,
        suspended=terms.suspended,
    )
    SIGNATURES += 1
    return {
        "status": keyring.sign_document(STATUS_PREFIX, payload),
        "lease_end": lease_end,
        "suspended": terms.suspended,
        "license_id": license_id,
        "device_id": device_id,
        "revoked": bool(revoked_at),
        "revoked_at": revoked_at,
        "seq": head.seq,
        "as_of": issued_at,
        "certificates": certificates,
    }
