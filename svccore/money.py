"""Money as it is shown and sent: each currency's decimals (ISO 4217 minor units, from
Babel's CLDR data, not a table typed here) and the exact form of an amount, a price or
a quantity for output.

Every surface that writes money (the JSON API, the console, ``svcctl``, CSV) takes the
currency's decimals from :func:`minor_units`, so ``630`` euros reads ``630.00``
everywhere and ``630`` yen reads ``630``. Output never rounds: a value with more non-zero
decimals than its currency has (a price of 0.0125 per 1000 inferences) keeps them all.
Free of Django, so the operator tool shares it.
"""

from __future__ import annotations

import functools
from decimal import Decimal
from typing import Any

from babel.numbers import get_currency_precision

DEFAULT_MINOR_UNITS = 2
# Prices (unit prices, prices per 1000 inferences) carry at most this many decimals:
# the catalogue refuses more when it is loaded, and the price columns hold exactly this.
PRICE_PLACES = 4
# Amount and total columns hold three decimals (KWD, BHD, TND...): the catalogue refuses
# a currency with more (CLF, UYW: units of account, not invoiced).
AMOUNT_PLACES_MAX = 3


@functools.cache
def minor_units(currency: str) -> int:
    """Decimals of ``currency`` (an ISO 4217 code, any case), from the CLDR data Babel
    maintains (JPY 0, EUR 2, KWD 3, CLF 4): 2 for an empty or unknown code."""
    code = currency.upper() if isinstance(currency, str) else ""
    if len(code) != 3 or not code.isalpha():
        return DEFAULT_MINOR_UNITS
    return get_currency_precision(code)


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
