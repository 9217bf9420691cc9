"""Usage ingestion (spec §4.2, contract §7): ``POST /v1/usage`` stores a device's usage
records exactly once and adds them to the per-licence daily rollups in the same
statement, then answers with a signed receipt.

Deduplication is the unique (device_id, period_start, period_end) key, never a
check-then-insert; on PostgreSQL the records table is partitioned by month of
``period_start`` (see :mod:`billing.partitions`), which is part of that key, so the key
still holds across partitions. Rating and the ledger read the rollups, never the records.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum

from billing.limits import (
    DAY,
    EPOCH,
    MAX_COUNTER,
    MAX_RECORDS_PER_CALL,
    MAX_TIMESTAMP,
)
from billing.models import UsageDaily, UsageRecord
from config import clock
from config.errors import InvalidInput, Unauthorized
from devices.documents import NONCE_MAX_CHARS, RECEIPT_PREFIX, receipt_payload
from devices.errors import BadSignature
from licensing.held import license_held
from signing import keyring
from svccore.timeunits import unix

RECORD_FIELDS = ("period_start", "period_end", "inferences", "frames", "stream_seconds", "events")
_NONCE = re.compile(r"[A-Za-z0-9_-]+")  # base64url without padding


def _unit_claims(token: str | None) -> dict[str, Any]:
    if not token:
        raise Unauthorized("usage upload needs the header Authorization: Bearer <unit token>")
    try:
        return keyring.verify(token)
    except BadSignature as exc:
        raise Unauthorized(f"unit token rejected: {exc}") from None


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


_SUMS = ("records", "inferences", "frames", "stream_seconds", "events")


def _store_postgresql(
    *, license_id: str, customer_id: str, sku: str, device_id: str, rows: list[tuple]
) -> int:
    """Insert ``rows`` and add the inserted ones to the daily rollups in one statement;
    returns how many were inserted.

    ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` lets the unique constraint decide, so
    two concurrent calls carrying the same record each learn exactly whether theirs was
    stored; the rollup upsert reads only what this statement inserted. The records travel
    as six array literals (one short statement to parse, no per-value adaptation) and go
    in key order, as do the rollup days, so two calls waiting on each other's rows always
    wait in the same direction (no deadlock).
    """
    records = connection.ops.quote_name(UsageRecord._meta.db_table)
    daily = connection.ops.quote_name(UsageDaily._meta.db_table)
    # Validated ints only: the literals cannot carry anything but digits and commas.
    arrays = ["{" + ",".join(map(str, column)) + "}" for column in zip(*rows, strict=True)]
    added = ", ".join(f"{name} = daily.{name} + excluded.{name}" for name in _SUMS)
    # Identifiers come from the models; every value is a placeholder.
    sql = f"""
            WITH inserted AS (
                INSERT INTO {records} (license_id, customer_id, sku, device_id, received_at,
                    period_start, period_end, inferences, frames, stream_seconds, events)
                SELECT %s, %s, %s, %s, now(), * FROM unnest(%s::bigint[], %s::bigint[],
                    %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])
                ON CONFLICT (device_id, period_start, period_end) DO NOTHING
                RETURNING period_start, inferences, frames, stream_seconds, events
            ), rolled_up AS (
                INSERT INTO {daily} AS daily (license_id, customer_id, sku, day, records,
                    inferences, frames, stream_seconds, events)
                SELECT %s, %s, %s, DATE '1970-01-01' + (period_start / {DAY})::integer,
                    count(*), sum(inferences)::bigint, sum(frames)::bigint,
                    sum(stream_seconds)::bigint, sum(events)::bigint
                FROM inserted GROUP BY 4 ORDER BY 4
                ON CONFLICT (license_id, day) DO UPDATE SET {added}
            )
            SELECT count(*) FROM inserted
            """  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [license_id, customer_id, sku, device_id, *arrays, license_id, customer_id, sku]
        )
        return cursor.fetchone()[0]


def _store_portable(
    *, license_id: str, customer_id: str, sku: str, device_id: str, rows: list[tuple]
) -> int:
    """The same as :func:`_store_postgresql` in two statements of SQL that SQLite (3.35+)
    understands: the insert returns the keys it stored, the rollups are summed here."""
    records = connection.ops.quote_name(UsageRecord._meta.db_table)
    daily = connection.ops.quote_name(UsageDaily._meta.db_table)
    fixed = [
        license_id, customer_id, sku, device_id,
        connection.ops.adapt_datetimefield_value(clock.now()),
    ]  # fmt: skip
    params: list[Any] = []
    for row in rows:
        params += fixed
        params += row
    values = ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(rows))
    # Identifiers come from the models; every value is a placeholder.
    insert = f"""
        INSERT INTO {records} (license_id, customer_id, sku, device_id, received_at,
            period_start, period_end, inferences, frames, stream_seconds, events)
        VALUES {values}
        ON CONFLICT (device_id, period_start, period_end) DO NOTHING
        RETURNING period_start, period_end
        """  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(insert, params)
        inserted = set(cursor.fetchall())
        days: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
        for period_start, period_end, inferences, frames, stream_seconds, events in rows:
            if (period_start, period_end) in inserted:
                sums = days[period_start // DAY]
                sums[0] += 1
                sums[1] += inferences
                sums[2] += frames
                sums[3] += stream_seconds
                sums[4] += events
        if days:
            params = []
            for day in sorted(days):
                date = connection.ops.adapt_datefield_value(EPOCH + dt.timedelta(days=day))
                params += [license_id, customer_id, sku, date, *days[day]]
            added = ", ".join(f"{name} = {daily}.{name} + excluded.{name}" for name in _SUMS)
            values = ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(days))
            upsert = f"""
                INSERT INTO {daily} (license_id, customer_id, sku, day, records, inferences,
                    frames, stream_seconds, events)
                VALUES {values}
                ON CONFLICT (license_id, day) DO UPDATE SET {added}
                """  # noqa: S608
            cursor.execute(upsert, params)
    return len(inserted)


def usage_ingest(
    *, token: str | None, device_id: Any, records: Any, nonce: Any = None
) -> dict[str, Any]:
    """Store a device's usage records (spec §4.2, contract §7); returns
    ``{accepted, duplicates, receipt}`` plus ``deferred`` when more than 1000 records came.

    The verified unit token decides the licence and customer (never the body); the token
    must be bound to ``device_id`` and its licence not revoked. Validation is
    all-or-nothing. A record is a duplicate when its (device_id, period_start,
    period_end) is already stored or appeared earlier in the same call.

    ``receipt`` is a signed usage receipt (``devices.documents``) naming the distinct
    keys of the processed records, new and duplicate alike (never the deferred ones), and
    the licence's total inferences after this upload. It is signed after the transaction
    that stores the records, so a device that deletes only what a valid receipt covers
    never loses a record to a forged answer; an empty ``records`` list gets a receipt too
    (a signed time and the current total).
    """
    claims = _unit_claims(token)
    held = license_held(
        claims=claims, token=token, device_id=device_id, revoked_means="usage is no longer accepted"
    )
    license_id, customer_id, sku = held.license_id, held.customer_id, held.sku
    rows = _validated(records)
    nonce = _nonce(nonce)
    processed = rows[:MAX_RECORDS_PER_CALL]
    result: dict[str, Any] = {"accepted": 0, "duplicates": len(processed)}
    if len(rows) > MAX_RECORDS_PER_CALL:
        result["deferred"] = len(rows) - MAX_RECORDS_PER_CALL
    first: dict[tuple[int, int], tuple] = {}
    for row in processed:
        first.setdefault((row[0], row[1]), row)
    keys = sorted(first)
    with transaction.atomic():
        if keys:
            store = _store_postgresql if connection.vendor == "postgresql" else _store_portable
            inserted = store(
                license_id=license_id,
                customer_id=customer_id,
                sku=sku,
                device_id=device_id,
                rows=[first[key] for key in keys],
            )
            result["accepted"] = inserted
            result["duplicates"] = len(processed) - inserted
        # Read in the insert's transaction, so the total includes this upload; one
        # aggregate over the licence's rollup days (the usage_daily_once index).
        total = UsageDaily.objects.filter(license_id=license_id).aggregate(n=Sum("inferences"))
    payload = receipt_payload(
        issuer=settings.SVC_ISSUER,
        device_id=device_id,
        license_id=license_id,
        nonce=nonce,
        issued_at=unix(clock.now()),
        records=keys,
        inferences=int(total["n"] or 0),
    )
    result["receipt"] = keyring.sign_document(RECEIPT_PREFIX, payload)
    return result
