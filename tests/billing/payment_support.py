"""Issued invoices and credit notes written straight to the table, for the payment tests
(issue 43): what they test is what is owed, not how an invoice is rated."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal

from billing.models import Invoice
from config import clock

_seq = itertools.count(1)


def invoice(customer, gross: str, *, currency: str = "EUR", issued_at: dt.datetime | None = None,
            tax: str = "0") -> Invoice:  # fmt: skip
    issued_at = issued_at or clock.now()
    seq = next(_seq) + 100_000
    start = issued_at - dt.timedelta(days=30, seconds=seq)
    return Invoice.objects.create(
        kind=Invoice.Kind.INVOICE,
        number=f"INV-{issued_at.year}-{seq:06d}",
        year=issued_at.year,
        seq=seq,
        customer=customer,
        period_start=start,
        period_end=start + dt.timedelta(days=30),
        period_days=30,
        currency=currency,
        total=Decimal(gross) - Decimal(tax),
        tax_total=Decimal(tax),
        issued_at=issued_at,
    )


def several_credit_notes() -> bool:
    """Whether an invoice may have several (partial) credit notes (``credits`` a foreign
    key, not one-to-one)."""
    return not Invoice._meta.get_field("credits").one_to_one


def credit_note(invoice: Invoice, gross: str | None = None) -> Invoice:
    """A credit note of ``invoice``: in full, or of ``gross`` (a partial one)."""
    seq = next(_seq) + 100_000
    part = Decimal(gross) if gross is not None else invoice.gross_total
    share = part / invoice.gross_total if invoice.gross_total else Decimal(1)
    tax = (invoice.tax_total * share).quantize(Decimal("0.01"))
    return Invoice.objects.create(
        kind=Invoice.Kind.CREDIT_NOTE,
        number=f"CN-{invoice.year}-{seq:06d}",
        year=invoice.year,
        seq=seq,
        customer=invoice.customer,
        period_start=invoice.period_start,
        period_end=invoice.period_end,
        period_days=30,
        currency=invoice.currency,
        total=-(part - tax),
        tax_total=-tax,
        issued_at=clock.now(),
        credits=invoice,
        reason="test",
    )
