"""What issuing an invoice (:mod:`billing.issuing`) and a credit note
(:mod:`billing.credit_notes`) share: the customer's row lock, gapless numbers per series
and year, storing a document's lines, its event, and the shape a draft of it shows.
"""

from __future__ import annotations

from typing import Any

from billing.models import DocumentSequence, Invoice, InvoiceLine
from customers.models import Customer
from customers.services import customer_get
from events.services import event_emit
from svccore import money
from svccore.timeunits import unix

SERIES = {Invoice.Kind.INVOICE: "INV", Invoice.Kind.CREDIT_NOTE: "CN"}


def next_number(series: str, year: int) -> int:
    """Take the next number of ``series`` in ``year`` under a row lock held until commit:
    issues queue here, and a rolled-back issue gives its number back (gapless)."""
    DocumentSequence.objects.bulk_create(
        [DocumentSequence(series=series, year=year, last=0)], ignore_conflicts=True
    )
    sequence = DocumentSequence.objects.select_for_update().get(series=series, year=year)
    sequence.last += 1
    sequence.save(update_fields=["last"])
    return sequence.last


def locked_customer(customer_id: str) -> Customer:
    """The customer, row-locked until commit: issuing and crediting of one customer run
    one at a time, each seeing what the previous one committed.

    ``FOR NO KEY UPDATE``, not ``FOR UPDATE``: uploads check their rollups' foreign key
    to the customer (``FOR KEY SHARE``) at commit, and must not wait for an issuer that
    is itself waiting for their rollup rows (a deadlock)."""
    customer = customer_get(customer_id=customer_id)
    return Customer.objects.select_for_update(no_key=True).get(pk=customer.pk)


def store_lines(invoice: Invoice, lines: list[dict[str, Any]]) -> None:
    InvoiceLine.objects.bulk_create(
        InvoiceLine(
            invoice=invoice,
            position=position,
            kind=line["kind"],
            sku=line["sku"],
            batch_id=line.get("batch_id", ""),
            license_id=line.get("license_id", ""),
            description=line["description"][:300],
            quantity=line["quantity"],
            unit=line["unit"],
            unit_price=line["unit_price"],
            amount=line["amount"],
            credited_line=line.get("credited_line"),
        )
        for position, line in enumerate(lines, start=1)
    )


def document_event(type: str, document: Invoice) -> None:
    """``invoice.issued`` / ``credit_note.issued``, in the issuing transaction."""
    event_emit(
        type,
        customer_id=document.customer_id,
        data={
            "invoice_number": document.number,
            "customer_id": document.customer_id,
            "total": str(money.amount(document.total, document.currency)),
            "currency": document.currency,
            "period_start": unix(document.period_start),
            "period_end": unix(document.period_end),
        }
        | ({"credits": document.credits.number} if document.credits_id else {})
        | ({"reason": document.reason} if document.reason else {}),
    )


def document_as_drafted(document: Invoice) -> dict[str, Any]:
    """An issued document as a draft shows it (Unix seconds, lines as
    :meth:`InvoiceLine.as_dict <billing.models.InvoiceLine.as_dict>`)."""
    return {
        "customer_id": document.customer_id,
        "period_start": unix(document.period_start),
        "period_end": unix(document.period_end),
        "period_days": document.period_days,
        "currency": document.currency,
        "total": document.total,
        "tax_total": document.tax_total,
        "gross_total": document.gross_total,
        "tax_breakdown": tax_breakdown(document),
        "lines": [line.as_dict() for line in document.lines.order_by("position")],
    }


def tax_breakdown(document: Invoice) -> list[dict[str, Any]]:
    """The document's VAT rows as every surface shows them (Decimals)."""
    return [
        {
            "category": row.category,
            "rate": row.rate,
            "taxable_amount": row.taxable_amount,
            "tax_amount": row.tax_amount,
            "exemption_reason": row.exemption_reason,
        }
        for row in sorted(document.taxes.all(), key=lambda row: (row.category, row.rate))
    ]
