"""VAT on invoices and credit notes (issue 43), in EN 16931's categories.

One category per document, decided when it is issued from the seller's country
(``SVC_SELLER_COUNTRY``) and the customer's country, VAT id and exemption:

* **E** (exempt): the customer has a tax exemption; 0 %, the operator's reason printed
  as the exemption reason text (BT-120; no VATEX code, which would name one article);
* **S** (standard rate): a customer of the seller's country (or of no stated country),
  at that country's rate; a customer in another member state *without* a VAT id (a
  consumer) at its own country's rate (place of supply of electronically supplied
  services to consumers, Article 58 of Council Directive 2006/112/EC; declared via the
  One-Stop Shop);
* **AE** (reverse charge): a business in another member state with a VAT id; 0 % and
  the legal note :data:`REVERSE_CHARGE_NOTE`;
* **O** (not subject to VAT): a customer outside the EU. The supplies are services
  (licences, metered use), whose place of supply to a business outside the EU is the
  customer's country (Article 44): outside the scope of EU VAT. EN 16931's **G** ("export
  outside the EU") is for goods leaving the EU, which these are not.

The rate is the one :class:`~billing.models.VatRate` holds for the country on the issue
day (UTC). Tax is computed per (category, rate): the sum of the net line amounts taxed
so, times the rate, rounded half-up once to the currency's minor unit. The rows are
stored with the document (:class:`~billing.models.InvoiceTax`), so a rate changed later
never re-prices it; ``total`` stays the net sum of contract §6.
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections import defaultdict
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from audit.services import audited
from billing import pricing
from billing.models import Invoice, InvoiceTax, VatCategory, VatRate
from config.errors import InvalidInput, MisconfiguredService
from customers.models import Customer
from customers.tax_identity import EU_COUNTRIES, check_country
from svccore import dates

HUNDRED = Decimal(100)
ZERO_RATE = Decimal("0.00")
REVERSE_CHARGE_NOTE = (
    "Reverse charge: VAT to be accounted for by the recipient "
    "(Article 196, Council Directive 2006/112/EC)"
)
OUTSIDE_SCOPE_NOTE = (
    "Not subject to EU VAT: services supplied to a customer established outside the EU "
    "(Article 44, Council Directive 2006/112/EC)"
)


class Decision(NamedTuple):
    """The VAT treatment of one document."""

    category: str
    rate: Decimal
    exemption_code: str = ""
    exemption_reason: str = ""


def vat_rate(country: str, on: dt.date) -> Decimal:
    """``country``'s standard rate on day ``on``; a country without one is a
    misconfiguration (the operator adds the rate in the console: Billing, VAT rates)."""
    row = (
        VatRate.objects.filter(country=country, valid_from__lte=on)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gte=on))
        .order_by("-valid_from")
        .first()
    )
    if row is None:
        raise MisconfiguredService(
            f"no VAT rate of {country} is valid on {dates.day(on)}: add one in the console "
            "(Billing, VAT rates) before invoicing"
        )
    return row.rate


def vat_decision(customer: Customer, *, on: dt.date) -> Decision:
    """The category, rate and exemption of a document issued to ``customer`` on ``on``."""
    seller = settings.SVC_SELLER_COUNTRY
    if not seller:
        raise MisconfiguredService("SVC_SELLER_COUNTRY is not set: VAT cannot be decided")
    if customer.tax_exemption:
        return Decision(VatCategory.EXEMPT, ZERO_RATE, "", customer.tax_exemption)
    country = customer.country or seller
    if country == seller:
        return Decision(VatCategory.STANDARD, vat_rate(seller, on))
    if country in EU_COUNTRIES:
        if seller in EU_COUNTRIES and customer.vat_id:
            return Decision(
                VatCategory.REVERSE_CHARGE, ZERO_RATE, "VATEX-EU-AE", REVERSE_CHARGE_NOTE
            )
        return Decision(VatCategory.STANDARD, vat_rate(country, on))
    return Decision(VatCategory.OUTSIDE_SCOPE, ZERO_RATE, "VATEX-EU-O", OUTSIDE_SCOPE_NOTE)


def tax_rows(
    lines: list[dict[str, Any]], decision: Decision, currency: str
) -> list[dict[str, Any]]:
    """The VAT breakdown of ``lines`` (every kind alike): one row per (category, rate),
    its taxable amount the sum of the lines' net amounts and its tax rounded half-up to
    the currency's minor unit once."""
    taxable: dict[tuple[str, Decimal], Decimal] = defaultdict(Decimal)
    for line in lines:
        taxable[(decision.category, decision.rate)] += Decimal(line["amount"])
    return [
        {
            "category": category,
            "rate": rate,
            "taxable_amount": base,
            "tax_amount": pricing.money(base * rate / HUNDRED, currency),
            "exemption_code": decision.exemption_code,
            "exemption_reason": decision.exemption_reason,
        }
        for (category, rate), base in taxable.items()
    ]


def invoice_tax_store(document: Invoice, rows: list[dict[str, Any]]) -> None:
    InvoiceTax.objects.bulk_create(InvoiceTax(invoice=document, **row) for row in rows)


def invoice_tax_apply(
    *, customer: Customer, lines: list[dict[str, Any]], currency: str, on: dt.date
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The tax rows of a new invoice's ``lines`` and the fields it stores with them
    (tax total, buyer country and VAT id as decided on)."""
    decision = vat_decision(customer, on=on)
    rows = tax_rows(lines, decision, currency)
    fields = {
        "tax_total": sum((row["tax_amount"] for row in rows), Decimal(0)),
        "buyer_country": customer.country or settings.SVC_SELLER_COUNTRY,
        "buyer_vat_id": customer.vat_id,
    }
    return rows, fields


def credit_tax_rows(
    rows: list[InvoiceTax],
    *,
    net: Decimal,
    final: bool,
    credited: dict[tuple, list[Decimal]],
    currency: str,
) -> list[dict[str, Any]]:
    """A credit note's VAT breakdown (negated), at the category and rate its invoice
    was issued with (``rows``; never re-rated), for a credited net of ``net``.

    ``credited`` holds what earlier credit notes credited per (category, rate), as
    [taxable, tax]. The credit note that leaves nothing of the invoice to credit
    (``final``) takes exactly what remains of every row, so the credit notes' tax sums to
    the invoice's; any other taxes ``net`` at the invoice's rate, rounded half-up once
    to the currency's minor unit and never beyond what remains. An invoice taxed at
    several rates names no rate per line: it can only be credited whole."""
    out = []
    if not final and len(rows) > 1:
        raise InvalidInput(
            "the invoice is taxed at several VAT rates and its lines do not say which: "
            "credit it whole, not in part"
        )
    for row in rows:
        taxable_done, tax_done = credited.get((row.category, row.rate), [Decimal(0)] * 2)
        if final:
            taxable, tax = row.taxable_amount - taxable_done, row.tax_amount - tax_done
        else:
            taxable = net
            tax = min(pricing.money(net * row.rate / HUNDRED, currency), row.tax_amount - tax_done)
        out.append(
            {
                "category": row.category,
                "rate": row.rate,
                "taxable_amount": -taxable,
                "tax_amount": -tax,
                "exemption_code": row.exemption_code,
                "exemption_reason": row.exemption_reason,
            }
        )
    return out


def _rate_detail(result: VatRate, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "country": result.country,
        "rate": f"{result.rate:.2f}",
        "valid_from": dates.iso_day(result.valid_from),
        "valid_to": dates.iso_day(result.valid_to) if result.valid_to else None,
    }


def vat_rate_check(
    *,
    country: str,
    rate: Decimal,
    valid_from: dt.date,
    valid_to: dt.date | None,
    rate_id: int | None = None,
) -> str:
    """The rate's country, checked: an ISO code, a rate from 0 to under 100 %, a span
    that ends on or after it starts and overlaps no other rate of the country (one rate
    per country and day)."""
    country = check_country(country)
    if not country:
        raise InvalidInput("a VAT rate needs its country")
    if not Decimal(0) <= rate < HUNDRED:
        raise InvalidInput(f"a VAT rate is a percentage from 0 to under 100, not {rate}")
    if valid_to is not None and valid_to < valid_from:
        raise InvalidInput("valid_to (the last day) must not be before valid_from")
    overlapping = VatRate.objects.filter(country=country).exclude(pk=rate_id)
    overlapping = overlapping.filter(Q(valid_to__isnull=True) | Q(valid_to__gte=valid_from))
    if valid_to is not None:
        overlapping = overlapping.filter(valid_from__lte=valid_to)
    other = overlapping.order_by("valid_from").first()
    if other is not None:
        raise InvalidInput(
            f"{country} already has {other.rate} % from {dates.day(other.valid_from)}"
            + (f" to {dates.day(other.valid_to)}" if other.valid_to else " on")
            + ": end that rate (its valid to) the day before this one starts"
        )
    return country


@audited("vat_rate.save", detail=_rate_detail)
@transaction.atomic
def vat_rate_save(
    *,
    country: str,
    rate: Decimal,
    valid_from: dt.date,
    valid_to: dt.date | None = None,
    rate_id: int | None = None,
) -> VatRate:
    """Add a country's rate, or change one (``rate_id``). Issued documents keep the
    rate they were issued with (their InvoiceTax rows): nothing issued is re-priced."""
    country = vat_rate_check(
        country=country, rate=rate, valid_from=valid_from, valid_to=valid_to, rate_id=rate_id
    )
    row = VatRate.objects.select_for_update().get(pk=rate_id) if rate_id else VatRate()
    row.country, row.rate, row.valid_from, row.valid_to = country, rate, valid_from, valid_to
    row.save()
    return row


def vat_rates_seed() -> int:
    """The EU standard rates of billing migration 0016, when the table is empty (a test
    database after a flush); returns how many rows were written."""
    if VatRate.objects.exists():
        return 0
    seeded = importlib.import_module("billing.migrations.0016_vat")
    rows = [
        VatRate(
            country=country,
            rate=Decimal(rate),
            valid_from=dt.date.fromisoformat(start),
            valid_to=dt.date.fromisoformat(end) if end else None,
        )
        for country, rate, start, end in seeded.RATES
    ]
    VatRate.objects.bulk_create(rows)
    return len(rows)
