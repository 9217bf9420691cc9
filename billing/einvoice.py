"""Issued invoices and credit notes as EN 16931 e-invoices (issue 43): what both
syntaxes share. :mod:`billing.einvoice_cii` writes UN/CEFACT CII (the XML of Factur-X /
ZUGFeRD, profile EN 16931), :mod:`billing.einvoice_ubl` OASIS UBL 2.1; both read one
:class:`EDocument` built here from the stored document, so they cannot disagree.

* A credit note is written as EN 16931 credit note (type 381) with its amounts and
  quantities positive: the type says they are credited (EN 16931 forbids negative
  prices, BR-27), and it references the invoice it credits (BG-3).
* Quantities are written with three decimals, unit prices exactly as quoted (up to four),
  amounts with the currency's decimals.
* EN 16931 allows at most two decimals in any amount (BR-DEC-*). An amount in a
  three-decimal currency (KWD, BHD, ...) that uses its third decimal cannot be written
  without changing it: such a document has no e-invoice
  (:class:`NotExpressible`, a 409 naming the amount); its PDF is its invoice.
* Every line carries the document's VAT category and rate (one per document,
  :mod:`billing.vat`); a category O document carries no VAT identifiers (BR-O-02).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from decimal import Decimal

from django.conf import settings

from billing.documents import due_date, require_seller
from billing.models import Invoice, InvoiceLine, VatCategory
from config.errors import Conflict
from svccore import dates
from svccore.money import exact, minor_units

KINDS = dict(InvoiceLine.Kind.choices)
EN16931 = "urn:cen.eu:en16931:2017"
INVOICE, CREDIT_NOTE = "380", "381"
# UN/ECE Recommendation 20 "one": every line's own unit is in its name and description.
UNIT_CODE = "C62"
SEPA_CREDIT_TRANSFER, CREDIT_TRANSFER = "58", "30"
MAX_AMOUNT_DECIMALS = 2  # BR-DEC-*


# What XML 1.0 cannot hold (C0 controls but tab and newlines, lone surrogates, U+FFFE/F):
# a customer's name or address may contain them, its e-invoice drops them.
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(value: str) -> str:
    """``value`` without the characters XML 1.0 cannot carry."""
    return NOT_XML.sub("", value)


class NotExpressible(Conflict):
    """The document cannot be an EN 16931 e-invoice without changing an amount."""


@dataclasses.dataclass(frozen=True)
class EParty:
    name: str
    street: list[str]
    postcode: str
    city: str
    country: str
    vat_id: str = ""
    registration: str = ""
    email: str = ""
    phone: str = ""
    identifier: str = ""


@dataclasses.dataclass(frozen=True)
class ELine:
    position: int
    name: str
    description: str
    sku: str
    quantity: str
    unit_price: str
    amount: str


@dataclasses.dataclass(frozen=True)
class ETax:
    category: str
    rate: str | None  # None: category O carries no rate (BR-O-05, BR-48)
    taxable: str
    tax: str
    exemption_code: str
    exemption_reason: str


@dataclasses.dataclass(frozen=True)
class EDocument:
    number: str
    type_code: str
    issued: dt.date
    due: dt.date | None
    period_start: dt.date
    period_end: dt.date  # the last day of the period
    currency: str
    seller: EParty
    buyer: EParty
    lines: list[ELine]
    taxes: list[ETax]
    net_total: str
    tax_total: str
    gross_total: str
    notes: list[str]
    credits: str = ""
    credits_issued: dt.date | None = None
    iban: str = ""
    bic: str = ""
    payment_means: str = CREDIT_TRANSFER
    payment_terms: str = ""


def _day(moment: dt.datetime) -> dt.date:
    return moment.astimezone(dt.UTC).date()


def _amount(value: Decimal, currency: str, what: str, number: str) -> str:
    """``value`` with the currency's decimals, refused when EN 16931 cannot hold it."""
    value = abs(value) if value == 0 else value  # a negated zero is written 0, not -0
    shown = exact(value, min(minor_units(currency), MAX_AMOUNT_DECIMALS))
    if shown.as_tuple().exponent < -MAX_AMOUNT_DECIMALS:
        raise NotExpressible(
            f"{number} cannot be an EN 16931 e-invoice: its {what} {exact(value, 3)} "
            f"{currency} has {-shown.as_tuple().exponent} decimals and EN 16931 allows "
            f"amounts of at most {MAX_AMOUNT_DECIMALS} (BR-DEC); the PDF is its invoice"
        )
    return f"{shown:f}"


def e_document(document: Invoice) -> EDocument:
    """The document's facts as both syntaxes write them (see the module docstring)."""
    require_seller()
    credit_note = document.kind == Invoice.Kind.CREDIT_NOTE
    sign = -1 if credit_note else 1
    currency, number = document.currency, document.number

    def money(value: Decimal, what: str) -> str:
        return _amount(sign * value, currency, what, number)

    taxes = list(document.taxes.all())
    outside_scope = any(row.category == VatCategory.OUTSIDE_SCOPE for row in taxes)
    customer = document.customer
    address = customer.billing_address.splitlines()
    seller = EParty(
        name=settings.SVC_SELLER_NAME,
        street=list(settings.SVC_SELLER_ADDRESS),
        postcode=settings.SVC_SELLER_POSTCODE,
        city=settings.SVC_SELLER_CITY,
        country=settings.SVC_SELLER_COUNTRY,
        vat_id="" if outside_scope else settings.SVC_SELLER_VAT_ID,
        registration=settings.SVC_SELLER_REGISTRATION,
        email=settings.SVC_SELLER_EMAIL,
        phone=settings.SVC_SELLER_PHONE,
    )
    buyer = EParty(
        name=customer.name,
        # The billing address as typed: its last line is the city (with the postcode).
        street=address[:-1] if len(address) > 1 else address,
        postcode="",
        city=address[-1] if len(address) > 1 else "",
        country=document.buyer_country or settings.SVC_SELLER_COUNTRY,
        vat_id="" if outside_scope else document.buyer_vat_id,
        email=customer.contact if "@" in customer.contact else "",
        identifier=customer.pk,
    )
    lines = [
        ELine(
            position=line.position,
            name=f"{KINDS.get(line.kind, line.kind)}, {line.sku}",
            description=f"{line.description} ({line.unit})",
            sku=line.sku,
            quantity=f"{(sign * line.quantity).quantize(Decimal('0.001')):f}",
            unit_price=f"{exact(line.unit_price, min(minor_units(currency), 2)):f}",
            amount=money(line.amount, f"line {line.position} amount"),
        )
        for line in document.lines.all().order_by("position")
    ]
    e_taxes = [
        ETax(
            category=row.category,
            rate=None if row.category == VatCategory.OUTSIDE_SCOPE else f"{row.rate:f}",
            taxable=money(row.taxable_amount, f"taxable amount at {row.rate} %"),
            tax=money(row.tax_amount, f"tax at {row.rate} %"),
            exemption_code=row.exemption_code,
            exemption_reason=row.exemption_reason,
        )
        for row in taxes
    ]
    if not e_taxes:
        raise NotExpressible(
            f"{number} was issued before VAT (no VAT breakdown): EN 16931 requires one"
        )
    due = due_date(document)
    notes = [document.reason] if document.reason else []
    return EDocument(
        number=number,
        type_code=CREDIT_NOTE if credit_note else INVOICE,
        issued=_day(document.issued_at),
        due=_day(due) if due else None,
        period_start=_day(document.period_start),
        period_end=dates.last_day(document.period_end),  # the XML's ISO date, inclusive
        currency=currency,
        seller=seller,
        buyer=buyer,
        lines=lines,
        taxes=e_taxes,
        net_total=money(document.total, "net total"),
        tax_total=money(document.tax_total, "tax total"),
        gross_total=money(document.gross_total, "gross total"),
        notes=notes,
        credits=document.credits.number if document.credits_id else "",
        credits_issued=_day(document.credits.issued_at) if document.credits_id else None,
        iban=settings.SVC_SELLER_IBAN,
        bic=settings.SVC_SELLER_BIC,
        payment_means=SEPA_CREDIT_TRANSFER if currency == "EUR" else CREDIT_TRANSFER,
        payment_terms=(
            f"Credits invoice {document.credits.number}: refunded or set off"
            if credit_note
            else f"Payable within {settings.SVC_PAYMENT_TERMS_DAYS} days, quoting {number}"
        ),
    )
