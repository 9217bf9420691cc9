"""An issued invoice or credit note as the document a customer is sent: one template
(``billing/document.html``) rendered as printable HTML (the console) and as PDF/A-3b
(WeasyPrint), which :mod:`billing.downloads` sends as Factur-X (the console, the portal
and ``GET /v1/admin/invoices/{number}.pdf``).

The seller block and bank details come from settings (``SVC_SELLER_*``,
:mod:`config.seller`), the buyer block from the customer (name, billing address, tax
id), the due date from ``SVC_PAYMENT_TERMS_DAYS``.
Dates and the period (shown by its first and last day) go through :mod:`svccore.dates`;
numbers through :mod:`config.admin.display`, as everywhere in the console: money with the
currency's decimals and thousands separators, quantities grouped.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string

from billing.models import Invoice, InvoiceLine, VatCategory
from config.admin.display import amount, money, quantity
from config.errors import Conflict
from config.seller import missing_message
from svccore import dates

_KINDS = dict(InvoiceLine.Kind.choices)


def _tax_label(category: str, rate) -> str:
    if category == VatCategory.STANDARD:
        return f"VAT {quantity(rate)} %"
    return f"VAT 0 %, {VatCategory(category).label.lower()} ({category})"


def due_date(document: Invoice) -> dt.datetime | None:
    """When an invoice is due: issued plus the payment terms; a credit note has none."""
    if document.kind != Invoice.Kind.INVOICE:
        return None
    return document.issued_at + dt.timedelta(days=settings.SVC_PAYMENT_TERMS_DAYS)


class SellerNotSet(Conflict):
    """A node without ``SVC_SELLER_*`` was asked to issue or print a document."""


def require_seller() -> None:
    """Refuse (409, naming the variables) when the seller is not set: a document that
    asks to be paid names who is paid (:mod:`config.seller`)."""
    if settings.SVC_SELLER_MISSING:
        raise SellerNotSet(missing_message(settings.SVC_SELLER_MISSING))


def seller_block() -> dict[str, Any]:
    """The seller as documents print it (``SVC_SELLER_*``, :mod:`config.seller`)."""
    place = " ".join(
        part for part in (settings.SVC_SELLER_POSTCODE, settings.SVC_SELLER_CITY) if part
    )
    return {
        "name": settings.SVC_SELLER_NAME,
        "address": [*settings.SVC_SELLER_ADDRESS, *([place] if place else [])],
        "country": settings.SVC_SELLER_COUNTRY,
        "vat_id": settings.SVC_SELLER_VAT_ID,
        "registration": settings.SVC_SELLER_REGISTRATION,
        "iban": " ".join(
            settings.SVC_SELLER_IBAN[i : i + 4] for i in range(0, len(settings.SVC_SELLER_IBAN), 4)
        ),
        "bic": settings.SVC_SELLER_BIC,
        "email": settings.SVC_SELLER_EMAIL,
        "phone": settings.SVC_SELLER_PHONE,
    }


def document_context(document: Invoice) -> dict[str, Any]:
    """What the template shows of ``document`` (with its customer, lines and, on a credit
    note, the invoice it credits), every value already formatted."""
    require_seller()
    currency = document.currency
    customer = document.customer
    credit_note = document.kind == Invoice.Kind.CREDIT_NOTE
    due = due_date(document)
    taxes = list(document.taxes.all())
    return {
        "heading": "Credit note" if credit_note else "Invoice",
        "number": document.number,
        "credit_note": credit_note,
        "credits": document.credits.number if document.credits_id else "",
        "partial": document.partial,
        "reason": document.reason,
        "issued": dates.day(document.issued_at),
        "due": dates.day(due),
        "terms_days": settings.SVC_PAYMENT_TERMS_DAYS,
        "period": dates.period(document.period_start, document.period_end),
        "period_days": document.period_days,
        "currency": currency,
        "seller": seller_block(),
        "buyer": {
            "name": customer.name,
            "id": customer.pk,
            "address": customer.billing_address.splitlines(),
            "tax_id": customer.tax_id,
            "country": document.buyer_country,
            "vat_id": document.buyer_vat_id,
            "contact": customer.contact,
        },
        "lines": [
            {
                "position": line.position,
                "title": f"{_KINDS.get(line.kind, line.kind)}, {line.sku}",
                "description": line.description,
                "reference": line.batch_id or line.license_id,
                "quantity": quantity(line.quantity),
                "unit": line.unit,
                "unit_price": amount(line.unit_price, currency),
                "amount": amount(line.amount, currency),
            }
            for line in document.lines.all().order_by("position")
        ],
        "total": money(document.total, currency),
        # VAT (billing.vat): the rows fixed at issue; none on a document issued before VAT.
        "taxes": [
            {
                "label": _tax_label(row.category, row.rate),
                "taxable": amount(row.taxable_amount, currency),
                "tax": amount(row.tax_amount, currency),
                "note": row.exemption_reason,
            }
            for row in taxes
        ],
        "net_total": money(document.total, currency),
        "tax_total": money(document.tax_total, currency),
        "gross_total": money(document.gross_total, currency)
        if taxes
        else money(document.total, currency),
    }


def document_html(document: Invoice) -> str:
    """The document as a standalone, printable HTML page (no external resources)."""
    return render_to_string("billing/document.html", document_context(document))


def _no_fetching(url: str, *args: Any, **kwargs: Any):
    """WeasyPrint's URL fetcher: the document is self-contained, so nothing is fetched
    (a customer's name or address can never make the server open a URL or a file)."""
    raise ValueError(f"invoice documents fetch nothing ({url[:60]!r})")


def document_pdf(document: Invoice) -> bytes:
    """The document as PDF/A-3b (A4), from the same HTML: the carrier of its Factur-X
    XML (:func:`billing.downloads.facturx_pdf`)."""
    import weasyprint  # imported on first use: it loads Pango and fonts (~0.3 s)

    html = weasyprint.HTML(string=document_html(document), url_fetcher=_no_fetching)
    return html.write_pdf(pdf_variant="pdf/a-3b")


def pdf_filename(document: Invoice) -> str:
    return f"{document.number}.pdf"
