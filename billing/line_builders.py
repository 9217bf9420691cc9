"""The lines of an invoice, one builder per kind (contract §6): from the rows the ledger
(:mod:`billing.ledger`) attributes to an invoice or a rated window reads (new
activations, direct licences, renewals, trial conversions, add-on charges, metered
usage), and the maintenance of perpetual units. Each line is rounded once
(:func:`billing.pricing.line_amount`); late events of earlier periods get lines of their
own, priced in this period's tiers. :mod:`billing.rating` puts them together.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from billing import pricing, selectors
from billing.models import InvoiceLine
from config.admin.display import counted
from config.errors import MisconfiguredService
from svccore import addons, money


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
class AddOnRow:
    """The charges of one add-on grant billed on an invoice (issue 42): ``days`` summed
    over its ``licenses`` (each the days from when a token carrying it was signed to that
    token's end; 1 per licence for a perpetual add-on), ``late`` licences charged before
    its period. The grant's ``term_days`` is the term its ``unit_price`` is for."""

    grant_id: int
    code: str
    name: str
    sku: str
    batch_id: str | None
    license_id: str  # the batch key of a batch's grant, or the direct licence
    unit_price: Decimal
    currency: str
    term_days: int
    days: int = 0
    licenses: int = 0
    late: int = 0


@dataclass
class ConversionRow:
    """A trial batch's conversion billed on an invoice (licensing.trials): its trial
    units in service when converted, at the batch's unit price; ``late`` of them
    converted before the invoice's period."""

    batch_id: str
    sku: str
    unit_price: Decimal
    currency: str
    units: int
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


def addon_lines(rows: list[AddOnRow]) -> list[dict]:
    """One line per add-on grant (docs/finance.md, "Add-ons"): quantity = the days its
    licences were charged over the term the price is for, three decimals half-up
    (:func:`svccore.addons.line_quantity`), at the unit price as quoted; a perpetual
    add-on, one per licence."""
    lines = []
    for row in sorted(rows, key=lambda r: (r.sku, r.batch_id or "", r.license_id, r.grant_id)):
        on = f"batch {row.batch_id}" if row.batch_id else f"licence {row.license_id}"
        units = "unit" if row.batch_id else "licence"
        if row.term_days:
            basis = (
                f"{counted(row.licenses, units)}, {row.days:,} days of {row.term_days}-day terms"
            )
        else:
            basis = f"{counted(row.licenses, units)}, once each"
        lines.append(
            _line(
                kind=InvoiceLine.Kind.ADDON.value,
                sku=row.sku,
                description=f"{row.sku} add-on {row.name} ({row.code}) on {on}: {basis}"
                + _late_note(row.late, "charged"),
                quantity=addons.line_quantity(charged=row.days, term_days=row.term_days),
                unit=f"{units}-term" if row.term_days else units,
                unit_price=row.unit_price,
                currency=row.currency,
                batch_id=row.batch_id or None,
                license_id=None if row.batch_id else row.license_id,
            )
        )
    return lines


def conversion_lines(rows: list[ConversionRow]) -> list[dict]:
    """One line per converted trial batch: its trial units in service when converted x
    the batch's unit price, in the period of the conversion."""
    return [
        _line(
            kind=InvoiceLine.Kind.TRIAL_CONVERSION.value,
            sku=row.sku,
            description=f"{row.sku} trial batch {row.batch_id} converted to paid: units on "
            "trial when converted" + _late_note(row.late, "converted"),
            quantity=row.units,
            unit="unit",
            unit_price=row.unit_price,
            currency=row.currency,
            batch_id=row.batch_id,
        )
        for row in sorted(rows, key=lambda r: (r.sku, r.batch_id))
    ]


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
