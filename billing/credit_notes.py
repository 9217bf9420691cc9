"""Credit notes: ``CN-<year>-<seq>`` reverses an invoice.

A credit note carries the invoice's lines, total and VAT breakdown negated (the tax of
the day the invoice was issued, never re-rated), and the events the invoice
billed go back to waiting for the customer's next invoice (:func:`billing.ledger.reverse`).
When the credited invoice was the latest, the next invoice starts where it started (a
re-issue, ``revision`` + 1; :mod:`billing.periods`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction

from audit.services import audited
from billing import ledger, limits, vat
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


class AlreadyCredited(Conflict):
    pass


@audited("invoice.credit")
@transaction.atomic
def credit_note_issue(*, number: str, reason: str, now: dt.datetime | None = None) -> Invoice:
    """Reverse issued invoice ``number`` with a credit note ``CN-<year>-<seq>`` (its own
    gapless series): the same lines with negated quantities and amounts, and every event
    the invoice billed back to waiting for the customer's next invoice."""
    require_seller()
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason:
        raise InvalidInput("a credit note needs a reason (--reason), for the customer and audit")
    invoice = Invoice.objects.filter(number=number).first()
    if invoice is None:
        raise NotFound(f"invoice {number} does not exist")
    if invoice.kind != Invoice.Kind.INVOICE:
        raise InvalidInput(f"{number} is a credit note; only invoices can be credited")
    locked_customer(invoice.customer_id)
    existing = Invoice.objects.filter(credits=invoice).first()
    if existing is not None:
        raise AlreadyCredited(f"invoice {number} was already credited by {existing.number}")
    now = now or limits.now()
    year = now.astimezone(dt.UTC).year
    seq = next_number(SERIES[Invoice.Kind.CREDIT_NOTE], year)
    note_number = f"CN-{year}-{seq:06d}"
    ledger.reverse(credit_note=note_number, invoice=invoice.number)
    note = Invoice.objects.create(
        kind=Invoice.Kind.CREDIT_NOTE,
        number=note_number,
        year=year,
        seq=seq,
        customer_id=invoice.customer_id,
        period_start=invoice.period_start,
        period_end=invoice.period_end,
        period_days=invoice.period_days,
        currency=invoice.currency,
        total=-invoice.total,
        tax_total=-invoice.tax_total,
        buyer_country=invoice.buyer_country,
        buyer_vat_id=invoice.buyer_vat_id,
        issued_at=now,
        credits=invoice,
        revision=invoice.revision,
        reason=reason[:500],
    )
    store_lines(
        note,
        [
            {
                **line.as_dict(),
                "description": f"Credit of {invoice.number}: {line.description}",
                "quantity": -line.quantity,
                "amount": -line.amount,
            }
            for line in invoice.lines.order_by("position")
        ],
    )
    vat.invoice_tax_store(note, vat.credit_tax_rows(invoice))
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
    *, number: str, reason: str = "draft", now: dt.datetime | None = None
) -> dict[str, Any]:
    """What :func:`credit_note_issue` would issue now for invoice ``number``: its lines
    and total exactly (the "Credit of ..." descriptions, batch and licence ids included),
    computed by issuing it and rolling back (:func:`config.drafts.drafted`: its number,
    ledger reversal, event and audit entry go with it). Raises what issuing would.

    The shape of :func:`billing.issuing.invoice_draft`'s answer. ``reason`` is printed on
    the note but changes no line, so a confirmation page may draft before one is typed."""
    return drafted(
        lambda: credit_note_issue(number=number, reason=reason, now=now), document_as_drafted
    )
