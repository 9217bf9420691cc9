"""Finance exports of invoice lines: one row per line, as CSV or JSON.

The CSV is written for spreadsheets: UTF-8 with a byte-order mark (so Excel reads the
encoding right), CRLF line ends, a header row, plain numbers with a decimal point and no
thousands separators, and text cells that would start a formula quoted with an
apostrophe (CSV injection).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import IO, Any

from django.db.models import QuerySet

from billing.models import Invoice

COLUMNS = (
    "invoice_number",
    "issued_at",
    "customer_id",
    "customer_name",
    "period_start",
    "period_end",
    "currency",
    "kind",
    "sku",
    "batch_id",
    "description",
    "quantity",
    "unit",
    "unit_price",
    "amount",
)
NUMBER_COLUMNS = ("quantity", "unit_price", "amount")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _plain(value: Decimal | int, places: int) -> Decimal:
    """``value`` with at least ``places`` decimals and no trailing zeros beyond them:
    3.000 -> 3, 0.35 -> 0.35, 90.0000 -> 90.00."""
    value = Decimal(value)
    trimmed = value.normalize()
    if -trimmed.as_tuple().exponent < places or trimmed.as_tuple().exponent > 0:
        return value.quantize(Decimal(1).scaleb(-places))
    return trimmed


def _row(header: dict[str, Any], line: dict[str, Any]) -> dict[str, Any]:
    return header | {
        "kind": line["kind"],
        "sku": line["sku"],
        "batch_id": line.get("batch_id") or "",
        "description": line["description"],
        "quantity": _plain(line["quantity"], 0),
        "unit": line["unit"],
        "unit_price": _plain(line["unit_price"], 2),
        "amount": _plain(line["amount"], 2),
    }


def invoice_rows(invoices: Iterable[Invoice]) -> Iterator[dict[str, Any]]:
    """One dict per invoice line (keys = COLUMNS, numbers as Decimal), invoices in the
    order given, lines in invoice order."""
    if isinstance(invoices, QuerySet):
        invoices = invoices.select_related("customer").prefetch_related("lines")
    for invoice in invoices:
        header = {
            "invoice_number": invoice.number,
            "issued_at": _iso(invoice.issued_at),
            "customer_id": invoice.customer_id,
            "customer_name": invoice.customer.name,
            "period_start": _iso(invoice.period_start),
            "period_end": _iso(invoice.period_end),
            "currency": invoice.currency,
        }
        for line in invoice.lines.all():
            yield _row(
                header,
                {
                    "kind": line.kind,
                    "sku": line.sku,
                    "batch_id": line.batch_id,
                    "description": line.description,
                    "quantity": line.quantity,
                    "unit": line.unit,
                    "unit_price": line.unit_price,
                    "amount": line.amount,
                },
            )


def rated_rows(rated: dict[str, Any], *, customer_name: str = "") -> Iterator[dict[str, Any]]:
    """Rows of a rated, not issued invoice (``services.invoice_rate``): no number yet."""
    header = {
        "invoice_number": "",
        "issued_at": "",
        "customer_id": rated["customer_id"],
        "customer_name": customer_name,
        "period_start": _iso(dt.datetime.fromtimestamp(rated["period_start"], tz=dt.UTC)),
        "period_end": _iso(dt.datetime.fromtimestamp(rated["period_end"], tz=dt.UTC)),
        "currency": rated["currency"],
    }
    for line in rated["lines"]:
        yield _row(header, line)


def _cell(name: str, value: Any) -> str:
    if name in NUMBER_COLUMNS:
        return f"{value:f}"
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def write_csv(rows: Iterable[dict[str, Any]], fileobj: IO[str]) -> int:
    """Write ``rows`` as spreadsheet-safe CSV (BOM, header, CRLF) to a text file opened
    with ``newline=""``. Returns the number of rows written."""
    fileobj.write("\ufeff")
    writer = csv.writer(fileobj, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    count = 0
    for row in rows:
        writer.writerow([_cell(name, row[name]) for name in COLUMNS])
        count += 1
    return count


def write_json(rows: Iterable[dict[str, Any]], fileobj: IO[str]) -> int:
    """Write ``rows`` as a JSON array of objects, money and quantities as numbers."""
    items = list(rows)

    def number(value: Any) -> Any:
        if isinstance(value, Decimal):
            return int(value) if value == value.to_integral_value() else float(value)
        raise TypeError(f"cannot export {type(value).__name__}")

    json.dump(items, fileobj, default=number, indent=1, ensure_ascii=False)
    fileobj.write("\n")
    return len(items)


def preview_csv(rated: dict[str, Any], *, customer_name: str = "") -> str:
    """The CSV of a rated invoice that has not been issued (blank invoice number)."""
    buffer = io.StringIO(newline="")
    write_csv(rated_rows(rated, customer_name=customer_name), buffer)
    return buffer.getvalue()
