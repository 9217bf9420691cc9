"""Money as it is shown and sent: the one table of each currency's decimals (ISO 4217
minor units) and the exact form of an amount, a price or a quantity for output.

Every surface that writes money (the JSON API, the console, ``svcctl``, CSV) takes the
currency's decimals from :func:`minor_units`, so ``630`` euros reads ``630.00``
everywhere and ``630`` yen reads ``630``. Output never rounds: a value with more non-zero
decimals than its currency has (a price of 0.0125 per 1000 inferences) keeps them all.
Free of Django, so the operator tool shares it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

DEFAULT_MINOR_UNITS = 2
# ISO 4217 minor units of the currencies that do not have two decimals; every other code
# (EUR, USD, GBP...) has two.
MINOR_UNITS: dict[str, int] = {
    **dict.fromkeys(
        "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF".split(), 0
    ),
    **dict.fromkeys("BHD IQD JOD KWD LYD OMR TND".split(), 3),
    **dict.fromkeys("CLF UYW".split(), 4),
}


def minor_units(currency: str) -> int:
    """Decimals of ``currency`` (an ISO 4217 code, any case): 2 unless the table says
    otherwise, also for an empty or unknown code."""
    return MINOR_UNITS.get(currency.upper(), DEFAULT_MINOR_UNITS)


def exact(value: Any, places: int) -> Decimal:
    """``value`` with at least ``places`` decimals and none of its trailing zeros beyond
    them, never rounded: with 2, 630 -> 630.00, 0.35 -> 0.35, 90.0000 -> 90.00,
    0.0125 -> 0.0125; with 0, 3.000 -> 3, 1.500 -> 1.5. A float is refused: it would
    already have lost the exact value."""
    if isinstance(value, float | bool):
        raise TypeError(f"money must be Decimal, int or str, not {type(value).__name__}")
    value = Decimal(value)
    if not value.is_finite():
        raise ValueError(f"money must be a finite number, not {value}")
    trimmed = value.normalize()
    exponent = trimmed.as_tuple().exponent
    if exponent > -places:  # fewer decimals than the currency has, or 1E+3 for 1000
        return value.quantize(Decimal(1).scaleb(-places))
    return trimmed


def amount(value: Any, currency: str) -> Decimal:
    """An amount or price in ``currency`` for output: :func:`exact` with the currency's
    decimals (``630.00`` EUR, ``630`` JPY, ``0.0125`` EUR)."""
    return exact(value, minor_units(currency))


def quantity(value: Any) -> Decimal:
    """A quantity (units, thousands of inferences) for output: exact, without trailing
    zeros (``3``, ``12.345``, ``1.5``)."""
    return exact(value, 0)
