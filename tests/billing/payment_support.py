"""Issued invoices and credit notes written straight to the table, for the payment tests
(issue 43): what they test is what is owed, not how an invoice is rated."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal

from django.db import transaction

from billing.models import DocumentSequence, Invoice, InvoiceLine
from config import clock
from tests.history import rewritten

_seq = itertools.count(1)


def _numbered(series: str, year: int, seq: int) -> None:
    """The series' counter past ``seq``: PostgreSQL checks a document's number against
    it (billing migration 0009)."""
    DocumentSequence.objects.bulk_create(
        [DocumentSequence(series=series, year=year, last=0)], ignore_conflicts=True
    )
    DocumentSequence.objects.filter(series=series, year=year, last__lt=seq).update(last=seq)


def _line(document: Invoice) -> None:
    """One line summing to the document's net total (PostgreSQL checks that too)."""
    InvoiceLine.objects.create(
        invoice=document,
        position=1,
        kind="direct_license",
        sku="DETECT-STD",
        description="Camera licence",
        quantity=1 if document.total >= 0 else -1,
        unit="licence",
        unit_price=abs(document.total),
        amount=document.total,
    )


def invoice(customer, gross: str, *, currency: str = "EUR", issued_at: dt.datetime | None = None,
            tax: str = "0") -> Invoice:  # fmt: skip
    issued_at = issued_at or clock.now()
    seq = next(_seq) + 100_000
    start = issued_at - dt.timedelta(days=30, seconds=seq)
    with transaction.atomic():  # the invoice with its line: checked at commit on PostgreSQL
        return _invoice(customer, gross, currency, issued_at, tax, seq, start)


def _invoice(customer, gross, currency, issued_at, tax, seq, start) -> Invoice:
    _numbered("INV", issued_at.year, seq)
    document = Invoice.objects.create(
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
    _line(document)
    return document


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
    _numbered("CN", invoice.year, seq)
    with rewritten():  # a partial note does not negate its invoice's total (0009 checks)
        return _note(invoice, seq, part, tax)


def _note(invoice: Invoice, seq: int, part: Decimal, tax: Decimal) -> Invoice:
    note = Invoice.objects.create(
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
    _line(note)
    return note
