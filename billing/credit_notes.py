"""Credit notes: ``CN-<year>-<seq>`` credits an invoice, whole or in part.

A credit note carries the lines it credits negated: the whole invoice (what earlier
credit notes left of it), or chosen lines and quantities (issue 43 item 4), never more of
a line than it billed across all its credit notes (:mod:`billing.credit_lines` holds the
amounts' rule). Its VAT is the invoice's, never re-rated (:func:`billing.vat.credit_tax_rows`).

Re-billing (contract §6: a credit note returns what it credits to waiting) is the
operator's choice, ``rebill``:

* The whole of an invoice no credit note touched yet, with ``rebill`` (the default
  there, the behaviour before partial credits): every event the invoice billed goes
  back to waiting (:func:`billing.ledger.reverse`), and when it was the latest invoice
  the next one starts where it started (a re-issue, ``revision`` + 1; :mod:`billing.periods`).
* Anything else (chosen lines, or what earlier credit notes left) is a price credit by
  default: the events stay billed and the invoice's period stands. With ``rebill`` the
  events behind the credited unit-activation and direct-licence lines wait again and are
  billed on the next invoice (:mod:`billing.ledger_credits`, which refuses other kinds).

``lines`` name an invoice line by its **position** (1-based, as printed on the invoice,
the PDF and the e-invoice line id) with a quantity of at most three decimals.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction

from audit.services import audited
from billing import ledger, ledger_credits, limits, vat
from billing.credit_lines import (
    QUANTITY_PLACES,
    LineCredit,
    credit_amount,
    credited_taxes,
    shown,
)
from billing.credit_lines import line_credits as _line_credits
from billing.document_writes import (
    SERIES,
    document_as_drafted,
    document_event,
    locked_customer,
    next_number,
    store_lines,
)
from billing.documents import require_seller
from billing.models import Invoice, InvoiceUsage
from config.drafts import drafted
from config.errors import Conflict, InvalidInput, NotFound
from events.models import Event
from svccore import money


class AlreadyCredited(Conflict):
    pass


class CreditExceedsBilled(Conflict):
    """A line would be credited beyond the quantity it billed."""


def _credited_invoice(number: str) -> Invoice:
    invoice = Invoice.objects.filter(number=number).first()
    if invoice is None:
        raise NotFound(f"invoice {number} does not exist")
    if invoice.kind != Invoice.Kind.INVOICE:
        raise InvalidInput(f"{number} is a credit note; only invoices can be credited")
    return invoice


def _quantity(value: Any, position: Any) -> Decimal:
    try:
        quantity = Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        raise InvalidInput(f"line {position}: quantity {value!r} is not a number") from None
    if not quantity.is_finite() or quantity <= 0:
        raise InvalidInput(f"line {position}: the quantity to credit must be above 0")
    if quantity != round(quantity, QUANTITY_PLACES):
        raise InvalidInput(
            f"line {position}: quantity {quantity} has more than {QUANTITY_PLACES} decimals"
        )
    return quantity


def _chosen(
    number: str, states: list[LineCredit], lines: list[dict[str, Any]] | None
) -> list[tuple[LineCredit, Decimal]]:
    """(line, quantity to credit) for each line asked for (``None``: all that remains)."""
    if lines is None:
        return [(s, s.remaining_quantity) for s in states if s.remaining_quantity > 0]
    if not isinstance(lines, list) or not lines:
        raise InvalidInput("lines: give at least one {line, quantity}, or none for the whole")
    by_position = {state.line.position: state for state in states}
    chosen: list[tuple[LineCredit, Decimal]] = []
    seen: set[int] = set()
    for item in lines:
        position = item.get("line") if isinstance(item, dict) else None
        if isinstance(position, bool) or not isinstance(position, int):
            raise InvalidInput(f"lines: each names a line by its position (1-based), not {item!r}")
        state = by_position.get(position)
        if state is None:
            raise InvalidInput(
                f"{number} has no line {position} (its lines are 1 to {len(states)})"
            )
        if position in seen:
            raise InvalidInput(f"line {position} is named twice")
        seen.add(position)
        quantity = _quantity(item.get("quantity"), position)
        if quantity > state.remaining_quantity:
            line = state.line
            raise CreditExceedsBilled(
                f"line {position} ({line.kind} {line.sku}) of {number}: billed "
                f"{shown(line.quantity)}, already credited {shown(state.credited_quantity)}, "
                f"asked {shown(quantity)}; at most {shown(state.remaining_quantity)} remains "
                "to credit"
            )
        chosen.append((state, quantity))
    return sorted(chosen, key=lambda pair: pair[0].line.position)


@audited("invoice.credit")
@transaction.atomic
def credit_note_issue(
    *,
    number: str,
    reason: str,
    lines: list[dict[str, Any]] | None = None,
    rebill: bool | None = None,
    now: dt.datetime | None = None,
) -> Invoice:
    """Credit issued invoice ``number`` with a credit note ``CN-<year>-<seq>`` (its own
    gapless series): ``lines`` (``[{"line": position, "quantity": q}, ...]``) or, without
    them, all of the invoice that earlier credit notes left. ``rebill`` (default: only
    for the whole of an invoice not credited before) returns the credited events to
    waiting for the customer's next invoice; see the module docstring."""
    require_seller()
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason:
        raise InvalidInput("a credit note needs a reason (--reason), for the customer and audit")
    invoice = _credited_invoice(number)
    locked_customer(invoice.customer_id)
    earlier = list(Invoice.objects.filter(credits=invoice).order_by("pk"))
    states = _line_credits(invoice)
    # An invoice made by hand before lines were stored has none: only a whole credit.
    if (earlier or states) and not any(state.remaining_quantity > 0 for state in states):
        raise AlreadyCredited(
            f"invoice {number} was already credited by "
            f"{', '.join(note.number for note in earlier)}; nothing of it remains to credit"
        )
    chosen = _chosen(number, states, lines)
    # All that remains, whether named line by line or not: the last credit of the invoice.
    whole = len(chosen) == sum(1 for s in states if s.remaining_quantity > 0) and all(
        quantity == state.remaining_quantity for state, quantity in chosen
    )
    first_whole = whole and not earlier
    rebill = first_whole if rebill is None else bool(rebill)
    reissue = first_whole and rebill
    if rebill and not reissue:
        for state, quantity in chosen:
            ledger_credits.check_rebillable(state.line, quantity)
    currency = invoice.currency
    credited = [
        (state, quantity, credit_amount(state, quantity, currency)) for state, quantity in chosen
    ]
    net = sum((amount for _, _, amount in credited), Decimal(0)) if states else invoice.total
    taxes = vat.credit_tax_rows(
        list(invoice.taxes.order_by("category", "rate")),
        net=net,
        final=whole,
        credited=credited_taxes(invoice),
        currency=currency,
    )
    now = now or limits.now()
    year = now.astimezone(dt.UTC).year
    seq = next_number(SERIES[Invoice.Kind.CREDIT_NOTE], year)
    note_number = f"CN-{year}-{seq:06d}"
    if reissue:
        ledger.reverse(credit_note=note_number, invoice=invoice.number)
    elif rebill:
        ledger_credits.reverse_lines(
            credit_note=note_number,
            invoice=invoice,
            chosen=[(state.line, quantity) for state, quantity in chosen],
        )
    note = Invoice.objects.create(
        kind=Invoice.Kind.CREDIT_NOTE,
        number=note_number,
        year=year,
        seq=seq,
        customer_id=invoice.customer_id,
        period_start=invoice.period_start,
        period_end=invoice.period_end,
        period_days=invoice.period_days,
        currency=currency,
        total=-net,
        tax_total=sum((row["tax_amount"] for row in taxes), Decimal(0)),
        buyer_country=invoice.buyer_country,
        buyer_vat_id=invoice.buyer_vat_id,
        issued_at=now,
        credits=invoice,
        revision=invoice.revision,
        reason=reason[:500],
        partial=not first_whole,
        price_only=not rebill,
    )
    of = f"Credit of {invoice.number}" if first_whole else f"Credit of {invoice.number} line"
    store_lines(
        note,
        [
            {
                **state.line.as_dict(),
                "description": f"{of}: {state.line.description}"
                if first_whole
                else f"{of} {state.line.position}: {state.line.description}",
                "quantity": -quantity,
                "amount": -amount,
                "credited_line": state.line.position,
            }
            for state, quantity, amount in credited
        ],
    )
    vat.invoice_tax_store(note, taxes)
    if reissue:
        InvoiceUsage.objects.bulk_create(
            InvoiceUsage(
                invoice=note,
                sku=usage.sku,
                units=usage.units,
                allowance=usage.allowance,
                inferences=-usage.inferences,
                records=-usage.records,
                late_inferences=-usage.late_inferences,
                late_records=-usage.late_records,
            )
            for usage in invoice.usage.all()
        )
    document_event(Event.Type.CREDIT_NOTE_ISSUED, note)
    return note


def credit_note_draft(
    *,
    number: str,
    reason: str = "draft",
    lines: list[dict[str, Any]] | None = None,
    rebill: bool | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """What :func:`credit_note_issue` would issue now for invoice ``number`` with these
    ``lines`` and ``rebill``: its lines, totals and VAT exactly (the "Credit of ..."
    descriptions, batch and licence ids included), computed by issuing it and rolling
    back (:func:`config.drafts.drafted`: its number, ledger reversal, event and audit
    entry go with it). Raises what issuing would.

    The shape of :func:`billing.issuing.invoice_draft`'s answer, plus ``rebill`` and
    ``partial``. ``reason`` is printed on the note but changes no line, so a
    confirmation page may draft before one is typed."""

    def shown(note: Invoice) -> dict[str, Any]:
        return document_as_drafted(note) | {
            "credits": number,
            "rebill": not note.price_only,
            "partial": note.partial,
        }

    return drafted(
        lambda: credit_note_issue(
            number=number, reason=reason, lines=lines, rebill=rebill, now=now
        ),
        shown,
    )


def line_credits(*, number: str) -> list[LineCredit]:
    """The lines of invoice ``number`` with what is credited and what remains of each
    (the console's form, ``svcctl``'s question)."""
    return _line_credits(_credited_invoice(number))


def describe_remaining(state: LineCredit, currency: str) -> str:
    """``3 of 5 unit`` as a form prints what remains of a line."""
    line = state.line
    return (
        f"{state.remaining_quantity} of {line.quantity} {line.unit} "
        f"({money.amount(state.remaining_amount, currency)} {currency} remain)"
    )
