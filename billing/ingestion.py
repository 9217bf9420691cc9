"""Usage ingestion (spec §4.2, contract §7): ``POST /v1/usage`` stores a device's usage
records exactly once and adds them to the per-licence daily rollups in the same
statement, then answers with a signed receipt that names the counts the service holds.

A record's identity is (licence, device, period): as a licence is bound to one device,
the unique (licence, period) key of the records table, never a check-then-insert. The
same identity with the same counts is a duplicate; with other counts it is a conflict:
refused, the first counts kept, the conflict kept for review
(:class:`billing.models.UsageConflict`), audited and reported as a ``usage.conflict``
event. A record outside its licence's life (starting over an hour
before the licence was issued, or ending over five minutes after now) is refused and
listed; the rest of the call is stored. On PostgreSQL the records table is partitioned
by month of ``period_start`` (see :mod:`billing.partitions`), which is part of the key,
so the key still holds across partitions. Rating and the ledger read the rollups, never
the records.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum

from audit.models import AuditEntry
from audit.services import audit_record
from billing.limits import (
    FUTURE_LEEWAY_SECONDS,
    LIFE_LEEWAY_SECONDS,
    MAX_COUNTER,
    MAX_RECORDS_PER_CALL,
    MAX_TIMESTAMP,
)
from billing.models import UsageConflict, UsageDaily, UsageRecord
from billing.usage_store import store_portable, store_postgresql
from config import clock
from config.errors import InvalidInput, Unauthorized
from devices.documents import NONCE_MAX_CHARS, RECEIPT_PREFIX
from devices.errors import BadSignature
from events.models import Event
from events.services import event_emit
from licensing.held import HeldLicense, license_held
from licensing.services import unit_seen
from signing import keyring
from svccore.authority import receipt_payload
from svccore.timeunits import unix

RECORD_FIELDS = ("period_start", "period_end", "inferences", "frames", "stream_seconds", "events")
COUNTER_FIELDS = RECORD_FIELDS[2:]
CONFLICT_ACTION = "usage.conflict"
_NONCE = re.compile(r"[A-Za-z0-9_-]+")  # base64url without padding


def _unit_claims(token: str | None) -> dict[str, Any]:
    """The verified claims of the presented unit token. A token signed by a key revoked
    since is checked under that key: usage that happened is billed, and
    :func:`licensing.held.license_held` then accepts it only if it is byte for byte the
    token issued (a variant is refused and recorded as a possible compromise)."""
    if not token:
        raise Unauthorized("usage upload needs the header Authorization: Bearer <unit token>")
    try:
        return keyring.verify(token)
    except BadSignature as exc:
        try:
            return keyring.verify_under_revoked_key(token)
        except BadSignature:
            raise Unauthorized(f"unit token rejected: {exc}") from None


def unit_token_claims(token: str | None) -> dict[str, Any]:
    """The verified claims of a unit token as ``POST /v1/usage`` checks them (401
    otherwise): the usage file exchange authenticates by the same rule (issue 44)."""
    return _unit_claims(token)


def _record_error(index: int, record: Any) -> InvalidInput:
    """The message for the first thing wrong with ``record`` (the slow path)."""
    where = f"records[{index}]"
    if not isinstance(record, dict):
        return InvalidInput(f"{where} must be an object with {', '.join(RECORD_FIELDS)}")
    for name in RECORD_FIELDS:
        if name not in record:
            return InvalidInput(f"{where} lacks {name}; a usage record needs all six fields")
        value = record[name]
        if type(value) is not int:
            return InvalidInput(
                f"{where}.{name} must be a non-negative integer, not {type(value).__name__}"
            )
        cap = MAX_TIMESTAMP if name.startswith("period_") else MAX_COUNTER
        if not 0 <= value <= cap:
            return InvalidInput(f"{where}.{name} must be between 0 and {cap}, not {value}")
    return InvalidInput(
        f"{where}: period_end ({record['period_end']}) must be after period_start "
        f"({record['period_start']})"
    )


def _validated(records: Any) -> list[tuple[int, int, int, int, int, int]]:
    """Every record as a tuple in RECORD_FIELDS order, or InvalidInput naming the first
    bad index. Plain Python on purpose: this runs for up to 1000 records per call."""
    if not isinstance(records, list):
        raise InvalidInput("records must be an array of usage records")
    out = []
    append = out.append
    for index, record in enumerate(records):
        try:
            row = (
                record["period_start"],
                record["period_end"],
                record["inferences"],
                record["frames"],
                record["stream_seconds"],
                record["events"],
            )
        except (KeyError, TypeError):
            raise _record_error(index, record) from None
        start, end, inferences, frames, stream_seconds, events = row
        if not (
            type(record) is dict
            and type(start) is int
            and type(end) is int
            and type(inferences) is int
            and type(frames) is int
            and type(stream_seconds) is int
            and type(events) is int
            and 0 <= start < end <= MAX_TIMESTAMP
            and 0 <= inferences <= MAX_COUNTER
            and 0 <= frames <= MAX_COUNTER
            and 0 <= stream_seconds <= MAX_COUNTER
            and 0 <= events <= MAX_COUNTER
        ):
            raise _record_error(index, record)
        append(row)
    return out


def _nonce(value: Any) -> str:
    """The request's nonce, echoed in the receipt; "" when absent (older firmware)."""
    if value is None:
        return ""
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= NONCE_MAX_CHARS
        or not _NONCE.fullmatch(value)
    ):
        raise InvalidInput(
            f"nonce must be a string of 1-{NONCE_MAX_CHARS} base64url characters "
            "(A-Z, a-z, 0-9, '-', '_'), or absent"
        )
    return value


Key = tuple[int, int]
Row = tuple[int, int, int, int, int, int]


def _held_counts(*, license_id: str, device_id: str, keys: list[Key]) -> dict[Key, tuple]:
    """The counts held for ``keys`` of this licence and device (read after the insert,
    in its transaction: this call's records and every committed one)."""
    rows = UsageRecord.objects.filter(
        license_id=license_id,
        device_id=device_id,
        period_start__in=sorted({start for start, _ in keys}),
    ).values_list("period_start", "period_end", *COUNTER_FIELDS)
    wanted = set(keys)
    return {(row[0], row[1]): row[2:] for row in rows if (row[0], row[1]) in wanted}


def _counts(values: tuple) -> dict[str, int]:
    return dict(zip(COUNTER_FIELDS, values, strict=True))


def _conflicts_keep(
    held: HeldLicense, device_id: str, conflicts: list[tuple[int, Row, tuple]]
) -> None:
    """Keep each conflict for review (once per distinct counts sent), audit the call's
    conflicts and report them as one ``usage.conflict`` event; in the upload's
    transaction, so they stand or fall with what it stored."""
    seen_at = clock.now()
    UsageConflict.objects.bulk_create(
        [
            UsageConflict(
                license_id=held.license_id,
                customer_id=held.customer_id,
                sku=held.sku,
                device_id=device_id,
                period_start=row[0],
                period_end=row[1],
                **{f"held_{name}": value for name, value in _counts(kept).items()},
                **{f"sent_{name}": value for name, value in _counts(row[2:]).items()},
                seen_at=seen_at,
            )
            for _, row, kept in conflicts
        ],
        ignore_conflicts=True,
    )
    first = conflicts[0][1]
    periods = [[row[0], row[1]] for _, row, _ in conflicts[:20]]
    message = (
        f"{len(conflicts)} usage record(s) of licence {held.license_id} on device "
        f"{device_id} refused: the service holds other counts for the same periods (first "
        f"{first[0]}-{first[1]}); the first counts are kept"
    )
    audit_record(
        action=CONFLICT_ACTION,
        result=AuditEntry.Result.FAILED,
        target=held.license_id,
        detail={"device_id": device_id, "conflicts": len(conflicts), "periods": periods},
        message=message,
    )
    event_emit(
        Event.Type.USAGE_CONFLICT,
        customer_id=held.customer_id,
        data={
            "license_id": held.license_id,
            "customer_id": held.customer_id,
            "device_id": device_id,
            "sku": held.sku,
            "conflicts": len(conflicts),
            "period_start": first[0],
            "period_end": first[1],
            "reason": message,
        },
    )


def usage_ingest(
    *, token: str | None, device_id: Any, records: Any, nonce: Any = None
) -> dict[str, Any]:
    """Store a device's usage records (spec §4.2, contract §7); returns
    ``{accepted, duplicates, conflicts, refused, receipt}`` plus ``deferred`` when more
    than 1000 records came.

    The verified unit token decides the licence and customer (never the body); the token
    must be bound to ``device_id`` and its licence not revoked. Validation is
    all-or-nothing. Then each record is, in order: refused (``refused``: outside the
    licence's life, with the reason), stored (``accepted``), a duplicate (its identity
    held, or earlier in the call, with the same counts) or a conflict (``conflicts``:
    the same identity with other counts; the counts held are named).

    ``receipt`` is a signed usage receipt (``devices.documents``) naming each distinct
    identity processed and not refused (never the deferred ones) with the counts the
    service holds for it, the records refused for good (before the licence's life), and
    the licence's total inferences after this upload. It is signed after the
    transaction that stores the records, so a device that deletes only what a valid
    receipt holds with its own counts never loses a record to a forged or rewritten
    answer; an empty ``records`` list gets a receipt too (a signed time and the current
    total).
    """
    claims = _unit_claims(token)
    held = license_held(
        claims=claims, token=token, device_id=device_id, revoked_means="usage is no longer accepted"
    )
    license_id, customer_id, sku = held.license_id, held.customer_id, held.sku
    rows = _validated(records)
    nonce = _nonce(nonce)
    processed = rows[:MAX_RECORDS_PER_CALL]
    now = unix(clock.now())
    earliest = unix(held.issued_at) - LIFE_LEEWAY_SECONDS
    latest = now + FUTURE_LEEWAY_SECONDS
    first: dict[Key, tuple[int, Row]] = {}  # identity -> its first index and record
    repeats: list[tuple[int, Row]] = []
    refused: list[dict[str, Any]] = []
    refused_for_good: set[Key] = set()
    for index, row in enumerate(processed):
        start, end = row[0], row[1]
        if start < earliest:
            refused.append(
                {"index": index, "period_start": start, "period_end": end,
                 "detail": f"starts before the licence's life: licence {license_id} was "
                 f"issued at {earliest + LIFE_LEEWAY_SECONDS} (a record may start at most "
                 f"{LIFE_LEEWAY_SECONDS} s earlier)"}
            )  # fmt: skip
            refused_for_good.add((start, end))
        elif end > latest:
            refused.append(
                {"index": index, "period_start": start, "period_end": end,
                 "detail": f"ends in the future: the service's time is {now} (a record may "
                 f"end at most {FUTURE_LEEWAY_SECONDS} s later); send it again once it "
                 "has ended"}
            )  # fmt: skip
        elif (start, end) in first:
            repeats.append((index, row))
        else:
            first[start, end] = (index, row)
    keys = sorted(first)
    result: dict[str, Any] = {"accepted": 0, "duplicates": 0, "conflicts": [], "refused": refused}
    if len(rows) > MAX_RECORDS_PER_CALL:
        result["deferred"] = len(rows) - MAX_RECORDS_PER_CALL
    holding: dict[Key, tuple] = {}
    with transaction.atomic():
        if keys:
            store = store_postgresql if connection.vendor == "postgresql" else store_portable
            inserted = store(
                license_id=license_id,
                customer_id=customer_id,
                sku=sku,
                device_id=device_id,
                rows=[first[key][1] for key in keys],
            )
            result["accepted"] = inserted
            if inserted < len(keys):  # some were held already: with which counts?
                holding = _held_counts(license_id=license_id, device_id=device_id, keys=keys)
        conflicts: list[tuple[int, Row, tuple]] = []  # (index, record sent, counts held)
        for key in keys:
            index, row = first[key]
            kept = holding.setdefault(key, row[2:])  # stored now: the counts sent
            if kept != row[2:]:
                conflicts.append((index, row, kept))
        duplicates = len(keys) - result["accepted"] - len(conflicts)
        for index, row in repeats:
            kept = holding[row[0], row[1]]
            if kept == row[2:]:
                duplicates += 1
            else:
                conflicts.append((index, row, kept))
        result["duplicates"] = duplicates
        if conflicts:
            conflicts.sort(key=lambda conflict: conflict[0])
            _conflicts_keep(held, device_id, conflicts)
            result["conflicts"] = [
                {"index": index, "period_start": row[0], "period_end": row[1],
                 "held": _counts(kept)}
                for index, row, kept in conflicts
            ]  # fmt: skip
        # Read in the insert's transaction, so the total includes this upload; one
        # aggregate over the licence's rollup days (the usage_daily_once index).
        total = UsageDaily.objects.filter(license_id=license_id).aggregate(n=Sum("inferences"))
    payload = receipt_payload(
        issuer=settings.SVC_ISSUER,
        device_id=device_id,
        license_id=license_id,
        nonce=nonce,
        issued_at=unix(clock.now()),
        records=[(*key, *holding[key]) for key in keys],
        refused=sorted(refused_for_good),
        inferences=int(total["n"] or 0),
    )
    result["receipt"] = keyring.sign_document(RECEIPT_PREFIX, payload)
    # After the records' transaction and the receipt: at most one conditional UPDATE per
    # unit per SVC_LAST_SEEN_MINUTES, none in between, and it cannot fail the answer.
    unit_seen(license_id=license_id, device_id=device_id)
    return result
