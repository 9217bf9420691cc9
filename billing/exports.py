"""Finance exports of issued documents' lines: one row per line, as CSV or JSON. Credit
notes (``CN-...``) are rows like any invoice's, with negative quantities and amounts. The
CSV format itself lives in :mod:`svccore.csvformat` (shared with ``svcctl``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import IO, Any

from django.db.models import QuerySet

from billing.document_writes import tax_breakdown
from billing.models import Invoice
from svccore.csvformat import (
    COLUMNS,
    iso,
    line_row,
    period_columns,
    preview_csv,
    rated_rows,
    tax_columns,
    write_csv,
)

__all__ = [
    "COLUMNS",
    "invoice_rows",
    "preview_csv",
    "rated_rows",
    "write_csv",
    "write_json",
]


def invoice_rows(invoices: Iterable[Invoice]) -> Iterator[dict[str, Any]]:
    """One dict per invoice line (keys = COLUMNS, numbers as Decimal), invoices in the
    order given, lines in invoice order."""
    if isinstance(invoices, QuerySet):
        invoices = invoices.select_related("customer", "credits").prefetch_related("lines", "taxes")
    for invoice in invoices:
        header = {
            "invoice_number": invoice.number,
            "document_type": invoice.kind,
            "credits": invoice.credits.number if invoice.credits_id else "",
            "issued_at": iso(invoice.issued_at),
            "customer_id": invoice.customer_id,
            "customer_name": invoice.customer.name,
            **period_columns(invoice.period_start, invoice.period_end),
            "currency": invoice.currency,
            "document_total": invoice.total,
            **tax_columns(
                tax_breakdown(invoice),
                invoice.tax_total,
                invoice.gross_total,
            ),
        }
        for line in invoice.lines.all():
            yield line_row(header, line.as_dict())


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
