"""The finance CSV format of invoice lines, free of Django so ``svcctl`` writes the very
same bytes from the admin API's JSON as the server writes from its database.

Written for spreadsheets: UTF-8 with a byte-order mark (so Excel reads the encoding
right), CRLF line ends, a header row, plain numbers with a decimal point and no
thousands separators. It is also the one cell rule of every CSV the project writes (the
finance export, the fleet export, ``svcctl``): :func:`cell`.

The cell rule (CSV injection, as OWASP describes it): a value is written by its Python
type. Numbers (``int``, ``Decimal``, ``float``) are written as numbers, so a credit
note's ``-12.50`` stays a number. ``None`` is an empty cell. Every other value is text,
and text is made inert for Excel, LibreOffice and Google Sheets (:func:`starts_formula`).
The rule is by Unicode category, not a list of look-alikes: in the text's NFKC form
(which folds ``＝ ﹦ ﹢ ＋ ﹣ ＠`` and their kin into ``= + - @``), leading separators
(``Z*``, e.g. U+00A0, U+2007, U+3000, U+1680), controls and format characters (``Cc``,
``Cf``) and whitespace are passed over; when the next character is one of
:data:`FORMULA_START` (``=``, ``+``, ``-``, ``@``, U+2212 MINUS SIGN, tab, carriage
return, line feed), the cell gets a leading apostrophe. The apostrophe is the one added
character: remove it to get the value.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import unicodedata
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import IO, Any

from svccore import dates
from svccore.money import exact

COLUMNS = (
    "invoice_number",
    "document_type",  # invoice, credit_note, or preview (rated, not issued)
    "credits",  # on a credit note: the invoice it credits
    "issued_at",
    "customer_id",
    "customer_name",
    "period_start",
    "period_end",
    "currency",
    "kind",
    "sku",
    "batch_id",
    "license_id",
    "description",
    "quantity",
    "unit",
    "unit_price",
    "amount",
    "document_total",  # the document's net total (contract §6), on each of its rows
    # VAT (issue 43): the line's category and rate, the document's tax and gross totals;
    # empty on a preview (tax is decided when a document is issued).
    "vat_category",
    "vat_rate",
    "document_tax_total",
    "document_gross_total",
    # The period as invoices are read (issue 43): its first and last day, inclusive, as
    # ISO dates (period_end above is the exclusive 00:00 UTC after the last day).
    "period_first_day",
    "period_last_day",
)
# What a spreadsheet may read as the start of a formula, after NFKC normalisation (so
# every compatibility form of these is covered too). U+2212 has no NFKC decomposition.
# Tab, CR and LF are formula starters themselves, so they are looked at before they are
# passed over as controls.
FORMULA_START = frozenset("=+-@\u2212\t\r\n")
# Leading characters a spreadsheet may skip or show as nothing before a formula.
PASSED_OVER_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf"})


def iso(moment: dt.datetime | int) -> str:
    """UTC ISO 8601 of an aware datetime or of Unix seconds."""
    if isinstance(moment, int):
        moment = dt.datetime.fromtimestamp(moment, tz=dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def period_columns(start: dt.datetime | int, end: dt.datetime | int) -> dict[str, str]:
    """The period's cells: its bounds as stored, ``[period_start, period_end)`` in ISO
    8601 UTC, and its first and last day inclusive as ISO dates
    (:func:`svccore.dates.last_day`)."""
    return {
        "period_start": iso(start),
        "period_end": iso(end),
        "period_first_day": dates.iso_day(start),
        "period_last_day": dates.last_day(end).isoformat(),
    }


def tax_columns(breakdown: Any, tax_total: Any, gross_total: Any) -> dict[str, Any]:
    """The VAT columns of a document's rows: one category and rate per document (the
    first row of its breakdown), blank without one (a preview, or issued before VAT)."""
    first = breakdown[0] if breakdown else None
    return {
        "vat_category": first["category"] if first else "",
        "vat_rate": exact(first["rate"], 0) if first else "",
        "document_tax_total": exact(tax_total, 2) if tax_total is not None else "",
        "document_gross_total": exact(gross_total, 2) if gross_total is not None else "",
    }


def line_row(header: dict[str, Any], line: dict[str, Any]) -> dict[str, Any]:
    """One export row: the invoice's header fields plus one line's."""
    return header | {
        "kind": line["kind"],
        "sku": line["sku"],
        "batch_id": line.get("batch_id") or "",
        "license_id": line.get("license_id") or "",
        "description": line["description"],
        "quantity": exact(line["quantity"], 0),
        "unit": line["unit"],
        "unit_price": exact(line["unit_price"], 2),
        "amount": exact(line["amount"], 2),
    }


def rated_rows(rated: dict[str, Any], *, customer_name: str = "") -> Iterator[dict[str, Any]]:
    """Rows of a rated invoice (``invoice_rate`` or the invoice endpoint's JSON); it has
    no number until issued), or of an issued document as the admin API answers it."""
    header = {
        "invoice_number": rated.get("number", ""),
        "document_type": rated.get("kind") or "preview",
        "credits": rated.get("credits") or "",
        "issued_at": iso(rated["issued_at"]) if rated.get("issued_at") else "",
        "customer_id": rated["customer_id"],
        "customer_name": customer_name,
        **period_columns(rated["period_start"], rated["period_end"]),
        "currency": rated["currency"],
        "document_total": exact(rated["total"], 2),
        **tax_columns(rated.get("tax_breakdown"), rated.get("tax_total"), rated.get("gross_total")),
    }
    for line in rated["lines"]:
        yield line_row(header, line)


def starts_formula(text: str) -> bool:
    """Whether a spreadsheet could read ``text`` as a formula (CSV injection).

    True when, in the NFKC form of ``text``, the first character that is not a
    separator, control, format character or whitespace is one of :data:`FORMULA_START`
    (a tab, CR or LF among the leading characters counts as one)."""
    for char in unicodedata.normalize("NFKC", text):
        if char in FORMULA_START:
            return True
        if not (char.isspace() or unicodedata.category(char) in PASSED_OVER_CATEGORIES):
            return False
    return False


def spreadsheet_text(value: Any) -> str:
    """``value`` as a text cell a spreadsheet will not run: one that could start a
    formula (:func:`starts_formula`) gets a leading apostrophe, nothing else changes."""
    text = str(value)
    return "'" + text if starts_formula(text) else text


def cell(value: Any) -> Any:
    """The cell of ``value`` in any export, by its type: a number as a number (a
    ``Decimal`` in plain notation), None empty, anything else inert text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        return f"{value:f}"
    if isinstance(value, (int, float)):
        return value
    return spreadsheet_text(value)


def write_csv(rows: Iterable[dict[str, Any]], fileobj: IO[str]) -> int:
    """Write ``rows`` as spreadsheet-safe CSV (BOM, header, CRLF) to a text file opened
    with ``newline=""``. Returns the number of rows written."""
    fileobj.write("\ufeff")
    writer = csv.writer(fileobj, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    count = 0
    for row in rows:
        writer.writerow([cell(row[name]) for name in COLUMNS])
        count += 1
    return count


def preview_csv(rated: dict[str, Any], *, customer_name: str = "") -> str:
    """The CSV of a rated invoice that has not been issued (blank invoice number)."""
    buffer = io.StringIO(newline="")
    write_csv(rated_rows(rated, customer_name=customer_name), buffer)
    return buffer.getvalue()
