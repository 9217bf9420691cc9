"""Human tables and ``--json`` output."""

from __future__ import annotations

import csv
import datetime as dt
import json
import sys
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any, TextIO


def when(seconds: int | None, *, zero: str = "never") -> str:
    """Unix seconds as UTC text; 0 means no expiry (perpetual)."""
    if not seconds:
        return zero
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):  # money is parsed as Decimal; scripts get JSON numbers
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def print_json(data: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(data, indent=2, sort_keys=True, default=_default) + "\n")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    text_rows = [["" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out.write(line.format(*headers).rstrip() + "\n")
    out.write(line.format(*("-" * w for w in widths)).rstrip() + "\n")
    for row in text_rows:
        out.write(line.format(*row).rstrip() + "\n")


def fields(pairs: Sequence[tuple[str, Any]], out: TextIO | None = None) -> None:
    """``name  value`` lines, names aligned."""
    out = out or sys.stdout
    width = max((len(name) for name, _ in pairs), default=0)
    for name, value in pairs:
        out.write(f"{name:<{width}}  {value}\n")


# --- invoice CSV -------------------------------------------------------------------------
# The finance export format of billing.exports (the server's CSV), rebuilt here from the
# API's JSON because svcctl does not import Django; tests/operators/test_svcctl.py checks
# both produce the same bytes for the same invoice.
INVOICE_COLUMNS = (
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
_NUMBER_COLUMNS = ("quantity", "unit_price", "amount")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _iso(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _plain(value: Any, places: int) -> Decimal:
    value = Decimal(str(value))
    trimmed = value.normalize()
    if -trimmed.as_tuple().exponent < places or trimmed.as_tuple().exponent > 0:
        return value.quantize(Decimal(1).scaleb(-places))
    return trimmed


def _cell(name: str, value: Any) -> str:
    if name in _NUMBER_COLUMNS:
        return f"{value:f}"
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text  # no formula injection


def invoice_csv(invoice: dict[str, Any], handle: TextIO, *, customer_name: str = "") -> None:
    """Spreadsheet-safe CSV of a rated invoice: BOM, header row, CRLF, one row per line."""
    header = {
        "invoice_number": invoice.get("number", ""),
        "issued_at": "",
        "customer_id": invoice["customer_id"],
        "customer_name": customer_name,
        "period_start": _iso(invoice["period_start"]),
        "period_end": _iso(invoice["period_end"]),
        "currency": invoice["currency"],
    }
    handle.write("\ufeff")
    writer = csv.writer(handle, lineterminator="\r\n")
    writer.writerow(INVOICE_COLUMNS)
    for line in invoice["lines"]:
        row = header | {
            "kind": line["kind"],
            "sku": line["sku"],
            "batch_id": line.get("batch_id") or "",
            "description": line["description"],
            "quantity": _plain(line["quantity"], 0),
            "unit": line["unit"],
            "unit_price": _plain(line["unit_price"], 2),
            "amount": _plain(line["amount"], 2),
        }
        writer.writerow([_cell(name, row[name]) for name in INVOICE_COLUMNS])
