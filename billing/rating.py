"""Invoice rating (contract §6): the lines of an invoice from the events it bills.

Two callers share the line builders (:mod:`billing.line_builders`):

* :func:`invoice_rate` rates a rolling window of P days ending now, for
  ``GET /v1/admin/invoice`` and the console preview; nothing is stored.
* :mod:`billing.issuing` rates the events the ledger (:mod:`billing.ledger`) attributed
  to an invoice: the events of its period plus the late ones of earlier periods, which
  get lines of their own (``metered_overage_late``) priced in this period's tiers.

Money is ``Decimal`` end to end; each line is rounded once (:func:`billing.pricing.line_amount`).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.db.models import Count, Sum

from billing import limits, selectors
from billing.limits import PERIOD_DAYS_MAX, unix
from billing.line_builders import (
    ActivationRow,
    AddOnRow,
    ConversionRow,
    DirectRow,
    Meter,
    RenewalRow,
    activation_lines,
    addon_lines,
    conversion_lines,
    direct_lines,
    maintenance_lines,
    meter_lines,
    renewal_lines,
)
from billing.models import InvoiceLine
from config.errors import Conflict, InvalidInput
from customers.services import customer_get
from licensing.models import AddOnCharge, License, Renewal, Sku, TrialConversion

KIND_ORDER = [kind.value for kind in InvoiceLine.Kind]


def check_period_days(period_days: Any) -> int:
    if type(period_days) is not int or not 1 <= period_days <= PERIOD_DAYS_MAX:
        raise InvalidInput(
            f"period_days must be an integer 1..{PERIOD_DAYS_MAX}, not {period_days!r}"
        )
    return period_days


def catalogue_entries() -> dict[str, dict[str, Any]]:
    return {sku.code: sku.entry() for sku in Sku.objects.all()}


class SeveralCurrencies(Conflict):
    """The customer buys in more than one currency and the caller named none: one
    invoice per currency (contract §6), so the caller asks for each."""

    def __init__(self, customer_id: str, currencies: list[str]) -> None:
        super().__init__(
            f"customer {customer_id} buys in {', '.join(currencies)}: it gets one invoice per "
            f"currency; name the currency ({' or '.join(currencies)})"
        )
        self.currencies = currencies


def usage_currencies(entries: dict[str, dict[str, Any]]) -> dict[str, str]:
    """SKU -> the currency its usage is billed in (its catalogue entry's)."""
    return {sku: entry["currency"] for sku, entry in entries.items()}


def currencies(customer_id: str, entries: dict[str, dict[str, Any]]) -> list[str]:
    """The currencies the customer buys in, sorted; at least one (the catalogue's
    first currency, or EUR, for a customer who bought nothing yet)."""
    found = selectors.customer_currencies(
        customer_id=customer_id, usage_currencies=usage_currencies(entries)
    )
    if found:
        return found
    fallback = sorted({entry["currency"] for entry in entries.values()})
    return fallback[:1] or ["EUR"]


def billing_currency(
    customer_id: str, currency: str | None, entries: dict[str, dict[str, Any]]
) -> str:
    """The currency of the customer's invoice: ``currency`` when given (upper case), or
    the only one the customer buys in; :class:`SeveralCurrencies` when there are more."""
    if currency:
        return currency.upper()
    found = currencies(customer_id, entries)
    if len(found) > 1:
        raise SeveralCurrencies(customer_id, found)
    return found[0]


def invoice_lines(
    *,
    customer_id: str,
    period_days: int,
    activations: list[ActivationRow],
    directs: list[DirectRow],
    meters: dict[str, Meter],
    renewals: list[RenewalRow],
    units: dict[str, int],
    maintenance: list[dict],
    entries: dict[str, dict[str, Any]],
    addons: list[AddOnRow] | None = None,
    conversions: list[ConversionRow] | None = None,
) -> list[dict]:
    """The lines of these events, in contract order, those of quantity 0 left out; each
    line keeps its ``_currency``. Pure: the caller reads ``units`` (N per SKU) and the
    ``maintenance`` lines, so ``manage.py reconcile --deep`` re-rates an issued invoice
    from its ledger entries with the very rules that issued it."""
    lines = (
        activation_lines(activations)
        + direct_lines(directs)
        + meter_lines(
            meters, customer_id=customer_id, period_days=period_days, units=units, entries=entries
        )
        + maintenance
        + renewal_lines(renewals)
        + addon_lines(addons or [])
        + conversion_lines(conversions or [])
    )
    return [line for line in lines if line["quantity"]]


def rated(
    *,
    customer_id: str,
    start: dt.datetime,
    end: dt.datetime,
    activations: list[ActivationRow],
    directs: list[DirectRow],
    meters: dict[str, Meter],
    entries: dict[str, dict[str, Any]],
    currency: str,
    renewals: list[RenewalRow] | None = None,
    addons: list[AddOnRow] | None = None,
    conversions: list[ConversionRow] | None = None,
) -> dict[str, Any]:
    """The invoice in ``currency`` of these events for the period [start, end): spec
    §2.7 with Decimal money, the lines of other currencies left to their own invoice.
    The allowance counts the period's actual length in days; maintenance is charged when
    that length is 365 days or more; renewals, then add-ons, then trial conversions,
    come last."""
    period_days = (end - start) // dt.timedelta(days=1)
    lines = invoice_lines(
        customer_id=customer_id,
        period_days=period_days,
        activations=activations,
        directs=directs,
        meters=meters,
        renewals=renewals or [],
        units=selectors.billable_units_by_sku(customer_id=customer_id, start=start, end=end),
        maintenance=maintenance_lines(customer_id, end, entries) if period_days >= 365 else [],
        entries=entries,
        addons=addons,
        conversions=conversions,
    )
    lines = [line for line in lines if line.pop("_currency") == currency]
    return {
        "customer_id": customer_id,
        "period_start": unix(start),
        "period_end": unix(end),
        "currency": currency,
        "lines": lines,
        "total": sum((line["amount"] for line in lines), Decimal("0.00")),
    }


# --- a rolling window (contract §6) -----------------------------------------------------


def _window_activations(customer_id: str, start: dt.datetime, end: dt.datetime):
    """Billable activations per batch in the window, from the daily rollups (a transfer
    takes a seat already paid for: never billed)."""
    return [
        ActivationRow(
            batch_id=row.batch_id,
            sku=row.sku,
            unit_price=row.unit_price,
            currency=row.currency,
            units=row.billable,
        )
        for row in selectors.activations_by_batch(customer_id=customer_id, start=start, end=end)
        if row.billable
    ]


def _window_directs(customer_id: str, start: dt.datetime, end: dt.datetime):
    rows = (
        License.objects.filter(
            customer_id=customer_id,
            kind=License.Kind.DIRECT,
            issued_at__gte=start,
            issued_at__lt=end,
        )
        .exclude(device_id="*")
        .values("sku", "unit_price", "currency")
        .annotate(licenses=Count("id"))
        .order_by()
    )
    return [
        DirectRow(
            sku=row["sku"],
            unit_price=row["unit_price"],
            currency=row["currency"],
            licenses=row["licenses"],
        )
        for row in rows
    ]


def _window_renewals(customer_id: str, start: dt.datetime, end: dt.datetime):
    """Renewals of the window, summed per batch and per direct licence."""
    rows = (
        Renewal.objects.filter(
            customer_id=customer_id, renewed_at__gte=start, renewed_at__lt=end, units__gt=0
        )
        .values("batch_id", "license_id", "sku", "unit_price", "currency")
        .annotate(units=Sum("units"), renewals=Count("id"))
        .order_by()
    )
    return [
        RenewalRow(
            batch_id=row["batch_id"],
            license_id=row["license_id"],
            sku=row["sku"],
            unit_price=row["unit_price"],
            currency=row["currency"],
            units=row["units"],
            renewals=row["renewals"],
        )
        for row in rows
    ]


def _window_addons(customer_id: str, start: dt.datetime, end: dt.datetime):
    """Add-on charges of the window, summed per grant."""
    rows = (
        AddOnCharge.objects.filter(
            customer_id=customer_id, charged_at__gte=start, charged_at__lt=end
        )
        .values(
            "grant_id",
            "grant__code",
            "grant__name",
            "grant__term_days",
            "grant__license_id",
            "sku",
            "batch_id",
            "unit_price",
            "currency",
        )
        .annotate(days=Sum("quantity"), licenses=Count("license_id", distinct=True))
        .order_by()
    )
    return [
        AddOnRow(
            grant_id=row["grant_id"],
            code=row["grant__code"],
            name=row["grant__name"],
            sku=row["sku"],
            batch_id=row["batch_id"],
            license_id=row["grant__license_id"],
            unit_price=row["unit_price"],
            currency=row["currency"],
            term_days=row["grant__term_days"],
            days=row["days"],
            licenses=row["licenses"],
        )
        for row in rows
    ]


def _window_conversions(customer_id: str, start: dt.datetime, end: dt.datetime):
    """Trial batches converted in the window (one conversion per batch)."""
    rows = TrialConversion.objects.filter(
        customer_id=customer_id, converted_at__gte=start, converted_at__lt=end, units__gt=0
    ).values_list("batch_id", "sku", "unit_price", "currency", "units")
    return [ConversionRow(*row) for row in rows]


def _whole_second_after(moment: dt.datetime) -> dt.datetime:
    """``moment`` rounded up to the second. Events are stamped to the microsecond; a
    window ending there counts everything that happened before ``moment`` and is reported
    exactly in Unix seconds."""
    if moment.microsecond:
        moment = moment.replace(microsecond=0) + dt.timedelta(seconds=1)
    return moment


def invoice_rate(
    *,
    customer_id: str,
    period_days: int = 30,
    now: dt.datetime | None = None,
    currency: str | None = None,
) -> dict[str, Any]:
    """Rate a customer's invoice for the ``period_days`` before ``now`` (contract §6).

    Returns spec §2.7 with Decimal money: ``{customer_id, period_start, period_end,
    currency, lines, total}``; each line carries ``kind``, ``sku``, ``description``,
    ``quantity``, ``unit``, ``unit_price`` and ``amount`` (rounded half-up to the cent),
    plus ``batch_id`` on unit activation, batch renewal, batch add-on and trial
    conversion lines, ``license_id`` on a direct licence's renewal and add-on lines.
    Nothing is stored, and the window ignores what issued invoices have billed: it is a
    preview of the window, not of the ledger.
    A customer buying in several currencies has one invoice per currency: ``currency``
    names which (without it, :class:`SeveralCurrencies`, a 409 naming them).
    """
    customer = customer_get(customer_id=customer_id)
    period_days = check_period_days(period_days)
    entries = catalogue_entries()
    currency = billing_currency(customer.id, currency, entries)
    end = _whole_second_after(now or limits.now())
    start = end - dt.timedelta(days=period_days)
    with selectors.one_snapshot():
        usage = selectors.inferences_by_sku(
            customer_id=customer.id, start=unix(start), end=unix(end)
        )
        return rated(
            customer_id=customer.id,
            start=start,
            end=end,
            activations=_window_activations(customer.id, start, end),
            directs=_window_directs(customer.id, start, end),
            meters={sku: Meter(sku=sku, inferences=n) for sku, n in usage.items()},
            entries=entries,
            currency=currency,
            renewals=_window_renewals(customer.id, start, end),
            addons=_window_addons(customer.id, start, end),
            conversions=_window_conversions(customer.id, start, end),
        )
