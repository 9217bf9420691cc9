"""What is left to credit of an invoice, and what a credit of it holds (issue 43 item 4).

An invoice's line is credited by the lines of its credit notes that name it
(``InvoiceLine.credited_line``, its position as printed on the invoice; credit notes
issued before partial credits have none and match their invoice position by position).
Across all its credit notes a line is never credited more than it billed, in quantity
or in amount:

* a credit of part of a line's quantity is worth round half-up (quantity x unit price)
  to the currency's minor unit, never more than what remains of the line's amount;
* the credit that takes a line's last quantity is worth exactly what remains of its
  amount, so the credits of a fully credited line sum to its amount (no rounding leak).

The VAT of a credit follows :func:`billing.vat.credit_tax_rows`. Both the credit note
service (:mod:`billing.credit_notes`) and the reconciliation
(:mod:`billing.credit_checks`) use :func:`credit_amount`, so the rule has one home.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from billing import pricing
from billing.models import Invoice, InvoiceLine

ZERO = Decimal(0)
QUANTITY_PLACES = 3  # as an invoice line carries it (contract §6)


@dataclass
class LineCredit:
    """One invoice line and what its credit notes credited of it so far (positive)."""

    line: InvoiceLine
    credited_quantity: Decimal = ZERO
    credited_amount: Decimal = ZERO

    @property
    def remaining_quantity(self) -> Decimal:
        return self.line.quantity - self.credited_quantity

    @property
    def remaining_amount(self) -> Decimal:
        return self.line.amount - self.credited_amount


def shown(quantity: Decimal) -> str:
    """A quantity as a message prints it: ``5``, ``29.667``, never ``5.000``."""
    return f"{quantity.normalize():f}" if quantity else "0"


def credited_position(credit_line: InvoiceLine) -> int:
    """The position of the invoice line a credit note's line credits."""
    return credit_line.credited_line or credit_line.position


def credit_amount(state: LineCredit, quantity: Decimal, currency: str) -> Decimal:
    """What crediting ``quantity`` of the line is worth (positive): the rest of its
    amount for its last quantity, else the rounded product, capped at what remains."""
    if quantity == state.remaining_quantity:
        return state.remaining_amount
    amount = pricing.line_amount(quantity, state.line.unit_price, currency)
    return min(amount, state.remaining_amount)


def line_credits(invoice: Invoice, *, before: int | None = None) -> list[LineCredit]:
    """Every line of ``invoice`` (by position) with what its credit notes credited
    (those with a primary key below ``before`` only, when given: the state a credit
    note was issued in)."""
    states = [LineCredit(line) for line in invoice.lines.order_by("position")]
    by_position = {state.line.position: state for state in states}
    notes = InvoiceLine.objects.filter(invoice__credits=invoice)
    if before is not None:
        notes = notes.filter(invoice_id__lt=before)
    for credit in notes:
        state = by_position.get(credited_position(credit))
        if state is not None:
            state.credited_quantity -= credit.quantity
            state.credited_amount -= credit.amount
    return states


def credited_taxes(invoice: Invoice, *, before: int | None = None) -> dict[tuple, list[Decimal]]:
    """Per (category, rate): [taxable, tax] credited of ``invoice`` so far (positive)."""
    sums: dict[tuple, list[Decimal]] = defaultdict(lambda: [ZERO, ZERO])
    notes = Invoice.objects.filter(credits=invoice)
    if before is not None:
        notes = notes.filter(pk__lt=before)
    for note in notes.prefetch_related("taxes"):
        for row in note.taxes.all():
            sums[(row.category, row.rate)][0] -= row.taxable_amount
            sums[(row.category, row.rate)][1] -= row.tax_amount
    return sums
