"""Re-billing part of an invoice (issue 43 item 4): the ledger entries behind chosen
lines of a partial credit note go back to waiting (:mod:`billing.ledger` explains the
ledger; :func:`billing.ledger.reverse` reverses a whole invoice).

Only a line whose entries are one event each can be re-billed in part, exactly:

* ``unit_activation`` (one entry per unit activated, +1, of the line's batch and price)
  and ``direct_license`` (one per licence, +1, of the line's SKU and price): crediting
  N of them with re-billing reverses N of the invoice's entries not yet reversed by an
  earlier credit note, the most recently activated or issued first (ordered by licence
  id on a tie). Which N does not change what the next invoice bills: N units of that
  batch (or N licences of that SKU) at the same price.
* Every other kind is refused: overage lines are tiers of one SKU's usage buckets over
  an allowance, renewals, add-ons and trial conversions are one entry holding many
  units or days, and maintenance is billed per period, not per event. None of them can
  be split without guessing; they are re-billed only by crediting the whole invoice
  (which reverses every entry), or credited as price only.
"""

from __future__ import annotations

from decimal import Decimal

from billing.models import Invoice, InvoiceLine, LedgerEntry
from config.errors import InvalidInput

# Invoice line kind -> ledger entry kind, for the lines that can be re-billed in part.
REBILLABLE = {
    InvoiceLine.Kind.UNIT_ACTIVATION: LedgerEntry.Kind.ACTIVATION,
    InvoiceLine.Kind.DIRECT_LICENSE: LedgerEntry.Kind.DIRECT,
}
_COPIED = ("customer_id", "kind", "sku", "license_id", "batch_id", "unit_price", "currency", "late")


def check_rebillable(line: InvoiceLine, quantity: Decimal) -> None:
    """Refuse re-billing ``quantity`` of ``line`` when the ledger cannot say exactly
    which events it is."""
    name = f"line {line.position} ({line.kind} {line.sku})"
    if line.kind not in REBILLABLE:
        raise InvalidInput(
            f"{name} cannot be re-billed in part: its ledger entries are not one event per "
            "unit, so which of them would wait again cannot be told exactly. Credit it "
            "without rebill (a price credit), or credit the whole invoice with rebill"
        )
    if quantity != quantity.to_integral_value():
        raise InvalidInput(
            f"{name} re-bills whole units: {quantity.normalize():f} is not a whole number"
        )


def _entries(invoice: Invoice, line: InvoiceLine):
    kind = REBILLABLE[line.kind]
    scope = {"kind": kind, "unit_price": line.unit_price, "sku": line.sku}
    if kind == LedgerEntry.Kind.ACTIVATION:
        scope["batch_id"] = line.batch_id
    return LedgerEntry.objects.filter(**scope)


def reverse_lines(
    *, credit_note: str, invoice: Invoice, chosen: list[tuple[InvoiceLine, Decimal]]
) -> None:
    """Reverse, under ``credit_note``, ``quantity`` entries behind each (line, quantity)
    in ``chosen`` (lines passed :func:`check_rebillable`): those events wait again."""
    for line, quantity in chosen:
        entries = _entries(invoice, line)
        reversed_ids = set(
            entries.filter(document__credits=invoice, quantity__lt=0).values_list(
                "license_id", flat=True
            )
        )
        billed = [
            entry
            for entry in entries.filter(document_id=invoice.number, quantity__gt=0).order_by(
                "-license__issued_at", "-license_id"
            )
            if entry.license_id not in reversed_ids
        ]
        count = int(quantity)
        if count > len(billed):
            raise InvalidInput(
                f"line {line.position} ({line.kind} {line.sku}): {count} to re-bill, but only "
                f"{len(billed)} of its events are still billed on {invoice.number}"
            )
        LedgerEntry.objects.bulk_create(
            LedgerEntry(
                document_id=credit_note,
                **{name: getattr(entry, name) for name in _COPIED},
                records=-entry.records,
                quantity=-entry.quantity,
            )
            for entry in billed[:count]
        )
