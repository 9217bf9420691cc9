"""Invoice rating (contract §6): the lines of an invoice from the events it bills.

Two callers share the line builders below:

* :func:`invoice_rate` rates a rolling window of P days ending now, for
  ``GET /v1/admin/invoice`` and the console preview; nothing is stored.
* :mod:`billing.issuing` rates the events the ledger (:mod:`billing.ledger`) attributed
  to an invoice: the events of its period plus the late ones of earlier periods, which
  get lines of their own (``metered_overage_late``) priced in this period's tiers.

Money is ``Decimal`` end to end; each line is rounded once (:func:`billing.pricing.line_amount`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Count, Sum

from billing import limits, pricing, selectors
from billing.limits import PERIOD_DAYS_MAX, unix
from billing.models import InvoiceLine
from config.display import counted
from config.errors import Conflict, InvalidInput, MisconfiguredService
from customers.services import customer_get
from licensing.models import License, Renewal, Sku
from svccore import money

KIND_ORDER = [kind.value for kind in InvoiceLine.Kind]


@dataclass
class ActivationRow:
    """Units of one batch billed on an invoice; ``late`` of them before its period."""

    batch_id: str
    sku: str
    unit_price: Decimal
    currency: str
    units: int
    late: int = 0


@dataclass
class DirectRow:
    """Direct licences of one SKU and price billed on an invoice."""

    sku: str
    unit_price: Decimal
    currency: str
    licenses: int
    late: int = 0


@dataclass
class RenewalRow:
    """Renewals billed on an invoice: of one batch (``batch_id``; ``units`` summed over
    its renewals) or of one direct licence (``batch_id`` None); ``late`` units of them
    renewed before its period."""

    batch_id: str | None
    license_id: str
    sku: str
    unit_price: Decimal
    currency: str
    units: int
    renewals: int = 0
    late: int = 0


@dataclass
class Meter:
    """Metered usage of one SKU on an invoice: ``inferences`` of the period and
    ``late_inferences`` of earlier periods received after those were invoiced, against
    the allowance of ``units`` units for the period."""

    sku: str
    inferences: int = 0
    records: int = 0
    late_inferences: int = 0
    late_records: int = 0
    units: int = 0
    allowance: Decimal = field(default_factory=Decimal)


def check_period_days(period_days: Any) -> int:
    if type(period_days) is not int or not 1 <= period_days <= PERIOD_DAYS_MAX:
        raise InvalidInput(
            f"period_days must be an integer 1..{PERIOD_DAYS_MAX}, not {period_days!r}"
        )
    return period_days


def catalogue_entries() -> dict[str, dict[str, Any]]:
    return {sku.code: sku.entry() for sku in Sku.objects.all()}


def _line(
    *,
    kind: str,
    sku: str,
    description: str,
    quantity: Decimal | int,
    unit: str,
    unit_price: Decimal,
    currency: str,
    batch_id: str | None = None,
    license_id: str | None = None,
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "kind": kind,
        "sku": sku,
        "description": description,
        "quantity": quantity,
        "unit": unit,
        "unit_price": unit_price,
        "amount": pricing.line_amount(quantity, unit_price, currency),
    }
    if batch_id is not None:
        line["batch_id"] = batch_id
    if license_id is not None:
        line["license_id"] = license_id
    line["_currency"] = currency
    return line


def _late_note(late: int, what: str) -> str:
    return f" ({late} {what} before this period, not billed until now)" if late else ""


def activation_lines(rows: list[ActivationRow]) -> list[dict]:
    return [
        _line(
            kind=InvoiceLine.Kind.UNIT_ACTIVATION.value,
            sku=row.sku,
            description=f"{row.sku} units activated from batch {row.batch_id}"
            + _late_note(row.late, "activated"),
            quantity=row.units,
            unit="unit",
            unit_price=row.unit_price,
            currency=row.currency,
            batch_id=row.batch_id,
        )
        for row in sorted(rows, key=lambda r: (r.sku, r.batch_id))
    ]


def direct_lines(rows: list[DirectRow]) -> list[dict]:
    return [
        _line(
            kind=InvoiceLine.Kind.DIRECT_LICENSE.value,
            sku=row.sku,
            description=f"{row.sku} direct licences at "
            f"{money.amount(row.unit_price, row.currency)} {row.currency} each"
            + _late_note(row.late, "issued"),
            quantity=row.licenses,
            unit="licence",
            unit_price=row.unit_price,
            currency=row.currency,
        )
        for row in sorted(rows, key=lambda r: (r.sku, r.unit_price))
    ]


def renewal_lines(rows: list[RenewalRow]) -> list[dict]:
    """One line per renewed batch (units activated when renewed x its unit price) and
    per renewed direct licence (1 x its price), in the period of the renewal."""
    lines = []
    for row in sorted(rows, key=lambda r: (r.sku, r.batch_id or "", r.license_id)):
        times = f" ({row.renewals} renewals)" if row.renewals > 1 else ""
        if row.batch_id:
            description = (
                f"{row.sku} batch {row.batch_id} renewed{times}: units activated when renewed"
            )
        else:
            description = f"{row.sku} licence {row.license_id} renewed{times}"
        lines.append(
            _line(
                kind=InvoiceLine.Kind.RENEWAL.value,
                sku=row.sku,
                description=description + _late_note(row.late, "renewed"),
                quantity=row.units,
                unit="unit" if row.batch_id else "licence",
                unit_price=row.unit_price,
                currency=row.currency,
                batch_id=row.batch_id or None,
                license_id=None if row.batch_id else row.license_id,
            )
        )
    return lines


def meter_lines(
    meters: dict[str, Meter],
    *,
    customer_id: str,
    period_days: int,
    units: dict[str, int],
    entries: dict[str, dict[str, Any]],
) -> list[dict]:
    """Overage lines per SKU and tier (contract §6.3); fills each meter's ``units`` and
    ``allowance``. The period's own usage takes the allowance and the first tiers; late
    usage is priced from where the period's overage ends (so an invoice costs the same
    as if every record had been on time in this period)."""
    lines, late_lines = [], []
    for sku in sorted(meters):
        meter = meters[sku]
        entry = entries.get(sku)
        if entry is None:
            raise MisconfiguredService(
                f"customer {customer_id} has usage of SKU {sku}, which is not in the catalogue; "
                "restore the catalogue entry to rate this invoice"
            )
        meter.units = units.get(sku, 0)
        meter.allowance = pricing.allowance(
            units=meter.units,
            allowance_per_unit=entry["allowance_per_unit"],
            period_days=period_days,
        )
        included = meter.allowance.quantize(Decimal(1))
        on_time = max(Decimal(0), Decimal(meter.inferences) - meter.allowance)
        overall = max(
            Decimal(0), Decimal(meter.inferences + meter.late_inferences) - meter.allowance
        )
        for tier, inferences in pricing.overage_by_tier(on_time, entry["overage_tiers"]):
            lines.append(
                _line(
                    kind=InvoiceLine.Kind.METERED_OVERAGE.value,
                    sku=sku,
                    description=(
                        f"{sku} inferences over the pooled allowance ({meter.inferences:,} used, "
                        f"{included:,} included for {meter.units:,} units over {period_days} "
                        f"days), tier from {tier['from_inferences']:,} inferences"
                    ),
                    quantity=pricing.thousands(inferences),
                    unit="1000 inferences",
                    unit_price=tier["price_per_1000"],
                    currency=entry["currency"],
                )
            )
        for tier, inferences in pricing.overage_between(on_time, overall, entry["overage_tiers"]):
            late_lines.append(
                _line(
                    kind=InvoiceLine.Kind.METERED_OVERAGE_LATE.value,
                    sku=sku,
                    description=(
                        f"{sku} inferences of earlier periods uploaded after they were "
                        f"invoiced ({meter.late_inferences:,} in "
                        f"{counted(meter.late_records, 'record')}), "
                        f"priced in this period's tier from {tier['from_inferences']:,} inferences"
                    ),
                    quantity=pricing.thousands(inferences),
                    unit="1000 inferences",
                    unit_price=tier["price_per_1000"],
                    currency=entry["currency"],
                )
            )
    return lines + late_lines


def maintenance_lines(
    customer_id: str, end: dt.datetime, entries: dict[str, dict[str, Any]]
) -> list[dict]:
    lines = []
    for sku, base_price, currency, count in selectors.perpetual_units(
        customer_id=customer_id, end=end
    ):
        entry = entries.get(sku)
        rate = entry["maintenance_rate"] if entry else Decimal(0)
        if not rate or base_price is None:
            continue  # not a perpetual SKU of the catalogue: nothing to maintain
        lines.append(
            _line(
                kind=InvoiceLine.Kind.MAINTENANCE.value,
                sku=sku,
                description=f"{sku} annual maintenance, {rate * 100:g}% of "
                f"{money.amount(base_price, currency)} {currency}",
                quantity=count,
                unit="unit-year",
                unit_price=pricing.money(rate * base_price, currency),
                currency=currency,
            )
        )
    return lines


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
) -> dict[str, Any]:
    """The invoice in ``currency`` of these events for the period [start, end): spec
    §2.7 with Decimal money, the lines of other currencies left to their own invoice.
    The allowance counts the period's actual length in days; maintenance is charged when
    that length is 365 days or more; renewals come last."""
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
    plus ``batch_id`` on unit activation and batch renewal lines, ``license_id`` on a
    direct licence's renewal line. Nothing is stored, and the window ignores
    what issued invoices have billed: it is a preview of the window, not of the ledger.
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
        )
