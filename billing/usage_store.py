"""Storing a validated usage upload (:mod:`billing.ingestion`): the records inserted
exactly once on their identity (licence, period) and the per-licence daily rollups
added to in the same statement on PostgreSQL (:func:`store_postgresql`), in two
statements of SQL SQLite runs on the portable path (:func:`store_portable`). Each
answers how many records were new; a record already held is left for the caller to
compare (a duplicate or a conflict).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from django.db import connection

from billing.limits import DAY, EPOCH
from billing.models import UsageDaily, UsageRecord
from config import clock

_SUMS = ("records", "inferences", "frames", "stream_seconds", "events")


def store_postgresql(
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
                ON CONFLICT (license_id, period_start, period_end) DO NOTHING
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


def store_portable(
    *, license_id: str, customer_id: str, sku: str, device_id: str, rows: list[tuple]
) -> int:
    """The same as :func:`store_postgresql` in two statements of SQL that SQLite (3.35+)
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
        ON CONFLICT (license_id, period_start, period_end) DO NOTHING
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
