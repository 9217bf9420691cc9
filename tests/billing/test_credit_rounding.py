"""The partial-credit rule (billing.credit_lines, billing.vat.credit_tax_rows) on any
line, price and split: no credit is negative or beyond what remains, and the credits of
a line fully credited sum exactly to its amount, their VAT exactly to the invoice's, in
every minor unit (JPY 0, EUR 2, KWD 3 decimals). Pure arithmetic: no database."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from billing import pricing, vat
from billing.credit_lines import LineCredit, credit_amount

QUANTUM = Decimal("0.001")


def _decimal(places: int, top: int):
    return st.integers(min_value=1, max_value=top * 10**places).map(
        lambda n: Decimal(n).scaleb(-places)
    )


@settings(max_examples=300, deadline=None)
@given(
    currency=st.sampled_from(["JPY", "EUR", "KWD"]),
    quantity=_decimal(3, 5000),
    unit_price=_decimal(4, 2000),
    rate=st.sampled_from([Decimal("0"), Decimal("7.70"), Decimal("19.00"), Decimal("21.00")]),
    cuts=st.lists(st.integers(min_value=1, max_value=999), min_size=0, max_size=6),
)
def test_partial_credits_never_leak_a_minor_unit(currency, quantity, unit_price, rate, cuts):
    amount = pricing.line_amount(quantity, unit_price, currency)
    line = SimpleNamespace(quantity=quantity, unit_price=unit_price, amount=amount)
    row = SimpleNamespace(
        category="S",
        rate=rate,
        taxable_amount=amount,
        tax_amount=pricing.money(amount * rate / 100, currency),
        exemption_code="",
        exemption_reason="",
    )
    state = LineCredit(line)
    credited_tax: dict[tuple, list[Decimal]] = {}
    tax_sum = Decimal(0)
    # Each cut takes a share (in thousandths) of what remains; then the rest.
    parts = [(state.remaining_quantity * cut / 1000).quantize(QUANTUM) for cut in cuts]
    for share in [*parts, None]:
        remaining = state.remaining_quantity
        asked = remaining if share is None else min(share, remaining)
        if asked <= 0:
            continue
        credit = credit_amount(state, asked, currency)
        assert Decimal(0) <= credit <= state.remaining_amount
        assert credit == pricing.money(credit, currency)  # in the minor unit
        final = asked == remaining
        (taxed,) = vat.credit_tax_rows(
            [row], net=credit, final=final, credited=credited_tax, currency=currency
        )
        assert taxed["taxable_amount"] == -credit
        assert -taxed["tax_amount"] <= row.tax_amount - tax_sum
        state.credited_quantity += asked
        state.credited_amount += credit
        tax_sum -= taxed["tax_amount"]
        done = credited_tax.setdefault(("S", rate), [Decimal(0), Decimal(0)])
        done[0] -= taxed["taxable_amount"]
        done[1] -= taxed["tax_amount"]
    assert state.credited_quantity == quantity
    assert state.credited_amount == amount
    assert tax_sum == row.tax_amount
