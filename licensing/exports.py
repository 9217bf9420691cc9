"""The fleet as CSV (``GET /v1/admin/fleet.csv``, ``svcctl fleet --csv``): every unit of
a customer, a batch or the whole fleet, streamed.

The rows are read a page of :data:`~licensing.selectors.FLEET_MAX` at a time from the
position of the last row sent, as the fleet's cursor pages
(:func:`licensing.selectors.fleet_records`: a range of the index
``activation_recent_first``), and each page is encoded and sent
before the next is read, so the export holds one page in memory whatever the size of
the fleet, and no query grows with it (no OFFSET, no transaction held open).

Written for spreadsheets like the finance CSV (``svccore.csvformat``): UTF-8 with a
byte-order mark, CRLF, a header row, text that would start a formula quoted.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from licensing.selectors import FLEET_MAX, fleet_records
from svccore.csvformat import spreadsheet_text

COLUMNS = (
    "device_id",
    "license_id",
    "batch_id",
    "customer_id",
    "sku",
    "fingerprint_source",
    "weak_binding",
    "sdk_version",
    "activated_at",
    "revoked",
    "seat_released",
    "transfer_of",
)


# What a row is read as: plain values, no model instances (a page of instances with
# their related rows holds reference cycles that only the garbage collector frees).
_VALUES = (
    "device_id",
    "license_id",
    "batch_id",
    "batch__customer_id",
    "batch__sku",
    "fingerprint_source",
    "weak_binding",
    "sdk_version",
    "activated_at",
    "license__revoked_at",
    "license__seat_release__id",
    "transfer_of__license_id",
    "id",
)


def _row(values: tuple) -> list[str | int]:
    """One unit as the fleet's JSON has it (``licensing.serializers.ActivationRecordOut``):
    Unix seconds, 0/1 flags, the released licence a transfer took or empty."""
    (device, license_id, batch_id, customer_id, sku, source, weak, sdk, activated_at,
     revoked_at, release, transfer_of, _) = values  # fmt: skip
    return [
        spreadsheet_text(device),
        license_id,
        batch_id,
        customer_id,
        sku,
        source,
        int(weak),
        spreadsheet_text(sdk),
        int(activated_at.timestamp()),
        int(revoked_at is not None),
        int(release is not None),
        transfer_of or "",
    ]


def fleet_csv(
    *,
    customer_id: str | None = None,
    batch_id: str | None = None,
    weak_binding: bool | None = None,
) -> Iterator[bytes]:
    """The fleet's CSV in chunks of one page each (the header first), most recent unit
    first, filtered like ``GET /v1/admin/fleet``."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    buffer.write("\ufeff")
    writer.writerow(COLUMNS)
    after = None
    while True:
        page = list(
            fleet_records(
                customer_id=customer_id, batch_id=batch_id, weak_binding=weak_binding, after=after
            ).values_list(*_VALUES)[:FLEET_MAX]
        )
        writer.writerows(_row(values) for values in page)
        yield buffer.getvalue().encode("utf-8")
        buffer.seek(0)
        buffer.truncate()
        if len(page) < FLEET_MAX:
            return
        after = (page[-1][8], page[-1][-1])  # the last row's activated_at and id
