"""``--line N=QTY``: a partial credit note's choice of an invoice line (its position, as
printed) and the quantity to credit, as ``manage.py credit_note`` and ``svcctl
credit-note`` both read it."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation


def parse_line_argument(value: str) -> dict:
    """``"2=1.5"`` -> ``{"line": 2, "quantity": Decimal("1.5")}``; ValueError saying why."""
    position, sep, quantity = value.partition("=")
    try:
        if not sep:
            raise ValueError
        line = int(position.strip())
        amount = Decimal(quantity.strip())
    except (ValueError, InvalidOperation):
        raise ValueError(
            f"--line {value!r}: expected POSITION=QUANTITY, e.g. --line 2=1.5"
        ) from None
    if line < 1 or not amount.is_finite() or amount <= 0:
        raise ValueError(f"--line {value!r}: a position from 1 and a quantity above 0")
    return {"line": line, "quantity": amount}
