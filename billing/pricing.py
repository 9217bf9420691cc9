"""Invoice arithmetic of contract §6 as plain functions over Decimal (no Django).

Every amount is rounded once, per line, half-up to the currency's minor unit (the cent
for EUR, the yen for JPY, the fils for KWD: 250 x 0.0125 = 3.125), from the quantity as
the line prints it: quantities of metered lines are thousands of inferences rounded
half-up to three decimals first, so a customer can check every line by hand (918.404 x
1.20 = 1102.08, although the exact inferences would make 1102.09).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from svccore.money import minor_units

MILLI = Decimal("0.001")
THOUSAND = Decimal(1000)
DAYS_PER_ALLOWANCE = Decimal(30)


def money(value: Decimal, currency: str = "") -> Decimal:
    """``value`` rounded half-up to ``currency``'s minor unit (JPY 0, EUR 2, KWD 3
    decimals; two for an unknown or empty code)."""
    places = minor_units(currency)
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def line_amount(quantity: Decimal | int, unit_price: Decimal, currency: str = "") -> Decimal:
    """A line's amount: its quantity as printed times its unit price, rounded once."""
    return money(Decimal(quantity) * unit_price, currency)


def allowance(*, units: int, allowance_per_unit: int, period_days: int) -> Decimal:
    """A = N · allowance_per_unit · P / 30, exact (it may be fractional)."""
    return Decimal(units * allowance_per_unit * period_days) / DAYS_PER_ALLOWANCE


def overage_by_tier(overage: Decimal, tiers: list[dict[str, Any]]) -> list[tuple[dict, Decimal]]:
    """Split ``overage`` inferences over graduated tiers: a tier starting at
    ``from_inferences`` holds the overage inferences from there up to the next tier's
    start. Returns (tier, inferences in it) for every tier, in tier order."""
    ordered = sorted(tiers, key=lambda t: int(t["from_inferences"]))
    out = []
    for index, tier in enumerate(ordered):
        low = Decimal(int(tier["from_inferences"]))
        high = (
            Decimal(int(ordered[index + 1]["from_inferences"]))
            if index + 1 < len(ordered)
            else None
        )
        top = overage if high is None else min(overage, high)
        out.append((tier, max(Decimal(0), top - low)))
    return out


def overage_between(
    low: Decimal, high: Decimal, tiers: list[dict[str, Any]]
) -> list[tuple[dict, Decimal]]:
    """The overage inferences from ``low`` up to ``high`` split over graduated tiers:
    (tier, inferences in it) for every tier, in tier order. Late usage of an invoice is
    the overage above the period's own, so it is priced where the period's left off."""
    below, upto = overage_by_tier(low, tiers), overage_by_tier(high, tiers)
    return [(tier, top - bottom) for (tier, bottom), (_, top) in zip(below, upto, strict=True)]


def thousands(inferences: Decimal) -> Decimal:
    """Quantity of a metered line: inferences / 1000 to at most three decimals."""
    return (inferences / THOUSAND).quantize(MILLI, rounding=ROUND_HALF_UP)
