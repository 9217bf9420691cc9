"""Human tables and ``--json`` output."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any, TextIO

from svccore import csvformat, dates, exactjson
from svccore.money import exact, minor_units


def when(seconds: int | None, *, zero: str = "never") -> str:
    """Unix seconds as the server's pages show a moment (:func:`svccore.dates.moment`,
    ``27 November 2026, 14:05 UTC``); 0 means no expiry (perpetual)."""
    return dates.moment(seconds, none=zero)


def day(seconds: int | None, *, zero: str = "") -> str:
    """Unix seconds as their UTC day, ``27 November 2026``."""
    return dates.day(seconds, none=zero)


def period(start: int, end: int) -> str:
    """An invoice period ``[start, end)`` by its days, ``1–30 November 2026``."""
    return dates.period(start, end)


def amount(value: Decimal | int | str, currency: str, *, grouped: bool = False) -> str:
    """An amount of money from the API with the currency's decimals: ``630`` or
    ``630.0`` -> ``630.00`` (EUR), never fewer, and never rounded (a unit price of
    ``0.035`` keeps its three).

    The API's value is a JSON number (parsed as Decimal by the client) or a string; a
    float is refused rather than formatted, it would already have lost the exact value."""
    if isinstance(value, float | bool):
        raise TypeError(f"money must be Decimal, int or str, not {type(value).__name__}")
    number = exact(value, minor_units(currency))
    return f"{number:,f}" if grouped else f"{number:f}"


def money(value: Decimal | int | str, currency: str, *, grouped: bool = True) -> str:
    """:func:`amount` followed by the currency code: ``20,000.00 EUR`` (``grouped=False``:
    ``20000.00 EUR``)."""
    return f"{amount(value, currency, grouped=grouped)} {currency}".rstrip()


def quantity(value: Decimal | int | str) -> str:
    """A quantity grouped, without trailing zeros: ``1,953,000``, ``12.345``."""
    return f"{exact(value, 0):,f}"


def _default(value: Any) -> Any:
    raise TypeError(f"cannot serialise {type(value).__name__}")


def print_json(data: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    # Money is parsed as Decimal and written back as the exact number the service sent.
    out.write(
        exactjson.encode(data, indent=2, separators=(",", ": "), sort_keys=True, default=_default)
        + "\n"
    )


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    out: TextIO | None = None,
    *,
    align_right: set[int] | frozenset[int] = frozenset(),
) -> None:
    """Columns as wide as their widest cell (numbers in ``align_right`` columns flush
    right, so digits line up)."""
    out = out or sys.stdout
    text_rows = [["" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    line = "  ".join(
        f"{{:{'>' if index in align_right else '<'}{w}}}" for index, w in enumerate(widths)
    )
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


def invoice_csv(invoice: dict[str, Any], handle: TextIO, *, customer_name: str = "") -> None:
    """The server's finance CSV (svccore.csvformat) of a rated invoice from the API."""
    csvformat.write_csv(csvformat.rated_rows(invoice, customer_name=customer_name), handle)
