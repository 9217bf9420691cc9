"""The fleet as CSV (``GET /v1/admin/fleet.csv``, ``svcctl fleet --csv``): every unit of
a customer, a batch or the whole fleet, streamed.

The rows are read a page of :data:`~licensing.selectors.FLEET_MAX` at a time along the
fleet's cursor (:func:`licensing.selectors.fleet_page`: a range of the index
``activation_recent_first`` from the last unit sent, read as plain values), and each
page is encoded and sent before the next is read, so the export holds one page in
memory whatever the size of the fleet, and no query grows with it (no OFFSET, no
transaction held open).

Written for spreadsheets like the finance CSV, by its cell rule (``svccore.csvformat.cell``):
UTF-8 with a byte-order mark, CRLF, a header row, numbers as numbers, every text cell
inert; times for people, as ISO 8601 UTC (``activated_at`` 2026-11-27T21:30:33Z, never
the API's Unix seconds: issue 41).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from licensing.selectors import FLEET_UNIT, fleet_page
from svccore.csvformat import cell
from svccore.timeunits import iso_utc

COLUMNS = tuple(FLEET_UNIT)  # the fields of GET /v1/admin/fleet's units, in order
# Columns holding Unix seconds in the API, written as ISO 8601 UTC here.
TIMES = frozenset({"activated_at", "last_seen_at", "lease_end", "trial_ends_at"})


def _row(unit: dict) -> list:
    # A unit never seen since last-seen times were recorded, or without a lease: an
    # empty cell.
    return [cell(iso_utc(unit[name], zero="") if name in TIMES else unit[name]) for name in COLUMNS]


def fleet_csv(
    *,
    customer_id: str | None = None,
    batch_id: str | None = None,
    weak_binding: bool | None = None,
    not_seen_days: int | None = None,
) -> Iterator[bytes]:
    """The fleet's CSV in chunks of one page each (the header first), most recent unit
    first, filtered like ``GET /v1/admin/fleet``; each page is read after the previous
    one is sent."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    buffer.write("\ufeff")
    writer.writerow(COLUMNS)
    cursor = None
    while True:
        page = fleet_page(
            customer_id=customer_id,
            batch_id=batch_id,
            weak_binding=weak_binding,
            not_seen_days=not_seen_days,
            cursor=cursor,
        )
        writer.writerows(_row(unit) for unit in page.units)
        yield buffer.getvalue().encode("utf-8")
        buffer.seek(0)
        buffer.truncate()
        if page.next_cursor is None:
            return
        cursor = page.next_cursor
