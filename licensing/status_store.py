"""Signed licence statuses a cache can serve (issue 46; RFC 5019 is the same idea for
OCSP): ``GET /v1/revocations/status`` answers a document made once per window or per
change of what it says, stored (:class:`~licensing.models.StatusDocument`, one row per
licence and device), not one signed for each request.

What a status says besides the time is its *basis*: the signing key, the list's epoch
and keys version, the licence's revocation time, its lease days and its hold. Every
request reads the basis now and the stored row with it (one query,
:func:`licensing.revocations.status_inputs`); the stored document is served when the basis matches
and its window (``SVC_STATUS_WINDOW_SECONDS`` from its signing) has not ended, else a
new one is signed and stored. So a revocation, a suspension or reinstatement, a lease
change on the licence, its batch or its SKU, or a signing-key change re-signs the
statuses it changes on their next request, and nothing else: no writer has to remember
to invalidate, and a revocation of one licence re-signs that licence's statuses only
(the list's sequence number moving is not part of the basis: a status at an earlier
``seq`` is still the list's word on a licence no revocation named since). Renewals,
add-ons and transfers change nothing a status says.

Check-in (issue 42): a status under a lease is a check-in when it is *signed* for the
licence's own device, and ``checked_in_at`` is its signing time, so the service's lease
end (check-in + days) is exactly the ``lease_end`` of the document every cache serves;
a cached answer never moves what the device or the service believes. Last seen is kept
at the cache's granularity: a request that reaches a node marks the unit seen, one a
cache answers does not (at most ``SVC_STATUS_MAX_AGE`` apart, as last seen is written
at most every ``SVC_LAST_SEEN_MINUTES`` anyway).

The HTTP answer carries ``ETag`` (the hash of the document, which a device computes from
the status it holds: :func:`devices.documents.status_etag`) and ``Cache-Control: public,
max-age=N`` with N at most ``SVC_STATUS_MAX_AGE`` and never past the window's end, so
no cache serves a document longer than the service would.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Subquery

from config import replica
from config.clock import now
from devices.documents import status_etag
from licensing import revocations
from licensing.models import StatusDocument
from signing import keyring

log = logging.getLogger(__name__)

_FIELDS = (
    "basis",
    "document",
    "etag",
    "seq",
    "issued_at",
    "valid_until",
    "revoked_at",
    "lease_end",
    "suspended",
)


@dataclass(frozen=True)
class StoredStatus:
    license_id: str
    device_id: str
    basis: str
    document: str
    etag: str
    seq: int
    issued_at: int
    valid_until: int
    revoked_at: int
    lease_end: int
    suspended: bool

    def max_age(self, at: int) -> int:
        """Seconds a cache may serve it from ``at``: never past its window's end."""
        return max(0, min(settings.SVC_STATUS_MAX_AGE, self.valid_until - at))

    def answer(self) -> dict[str, Any]:
        """The fields of ``LicenseStatusOut``."""
        return {
            "status": self.document,
            "license_id": self.license_id,
            "device_id": self.device_id,
            "revoked": bool(self.revoked_at),
            "revoked_at": self.revoked_at,
            "seq": self.seq,
            "as_of": self.issued_at,
            "lease_end": self.lease_end,
            "suspended": self.suspended,
            "certificates": keyring.certificates(),
        }


def _basis(head: revocations.Head, revoked_at: int, days: int | None, suspended: bool) -> str:
    return (
        f"{keyring.public_key_fingerprint()[:16]}:{head.epoch}:k{head.keys}:r{revoked_at}:"
        f"l{'-' if days is None else days}:s{int(suspended)}"
    )


def status_current(*, license_id: str, device_id: str) -> StoredStatus:
    """The status of ``license_id`` for ``device_id`` to serve now: the stored one while
    its basis holds and its window lasts (one query, no signature), else a new one,
    signed (a check-in for the licence's own device under a lease) and stored."""
    head, revoked_at, terms, row = _read(license_id, device_id)
    held = _current(license_id, device_id, head, revoked_at, terms, row)
    if held is None and replica.primary_from_now():
        # Read from a replica (config.replica): the status to sign and store is made
        # from the primary's inputs, in this request.
        head, revoked_at, terms, row = _read(license_id, device_id)
        held = _current(license_id, device_id, head, revoked_at, terms, row)
    if held is not None:
        return held
    basis = _basis(head, revoked_at, terms.days, terms.suspended)
    signed = revocations.status_signed(
        license_id=license_id,
        device_id=device_id,
        head=head,
        revoked_at=revoked_at,
        terms=terms,
        check_in=True,
    )
    made = StoredStatus(
        license_id=license_id,
        device_id=device_id,
        basis=basis,
        document=signed["status"],
        etag=status_etag(signed["status"]),
        seq=head.seq,
        issued_at=signed["as_of"],
        valid_until=signed["as_of"] + settings.SVC_STATUS_WINDOW_SECONDS,
        revoked_at=revoked_at,
        lease_end=signed["lease_end"],
        suspended=terms.suspended,
    )
    _store(made, exists=row is not None)
    return made


def _read(license_id: str, device_id: str):
    """The status's inputs (:func:`licensing.revocations.status_inputs`) and the stored
    row's fields (None: none stored), in one statement."""
    stored = StatusDocument.objects.filter(license_id=license_id, device_id=device_id)
    head, revoked_at, terms, row = revocations.status_inputs(
        license_id,
        # The stored row's fields, read in the same statement by its unique index.
        {f"held_{name}": Subquery(stored.values(name)[:1]) for name in _FIELDS},
    )
    if row is None:  # no list head to read it with (a database never migrated)
        row = stored.values_list(*_FIELDS).first()
    elif row[0] is None:  # no status stored for this licence and device yet
        row = None
    return head, revoked_at, terms, row


def _current(license_id, device_id, head, revoked_at, terms, row) -> StoredStatus | None:
    """The stored status while its basis holds and its window lasts, else None."""
    if row is None:
        return None
    held = StoredStatus(license_id, device_id, *row)
    basis = _basis(head, revoked_at, terms.days, terms.suspended)
    at = int(now().timestamp())
    return held if held.basis == basis and held.issued_at <= at < held.valid_until else None


def _store(status: StoredStatus, *, exists: bool) -> None:
    """Keep ``status`` as the one to serve. A failure to store costs a signature at the
    next request, never this answer."""
    values = {name: getattr(status, name) for name in _FIELDS}
    unit = {"license_id": status.license_id, "device_id": status.device_id}
    try:
        with transaction.atomic():
            if exists or not _created(unit, values):
                StatusDocument.objects.filter(**unit).update(**values)
    except DatabaseError:
        log.warning("status of %s not stored", status.license_id, exc_info=True)


def _created(unit: dict[str, str], values: dict[str, Any]) -> bool:
    """Insert the unit's first stored status; False when another request did first."""
    try:
        with transaction.atomic():
            StatusDocument.objects.create(**unit, **values)
    except IntegrityError:
        return False
    return True


def statuses_forget() -> None:
    """Drop every stored status (tests; an operator who wants every status re-signed at
    its next request: nothing else is lost)."""
    StatusDocument.objects.all().delete()
