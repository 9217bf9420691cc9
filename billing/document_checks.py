"""Issued documents checked against their own arithmetic, each other and the ledger: the
document half of ``manage.py reconcile`` (:mod:`billing.reconciliation`).

Every run
    * each line's ``amount`` is its quantity (as printed) times its unit price, rounded
      half-up to the currency's minor unit (:func:`billing.pricing.line_amount`);
    * each document's ``total`` is the sum of its lines;
    * each VAT row's tax is its taxable amount times its rate, rounded half-up once (an
      invoice's; a credit note's are replayed with it), and the rows sum to the net total
      and the tax total;
    * each invoice's credit notes, replayed in order by the rules that issued them
      (:mod:`billing.credit_checks`): lines that credit the invoice's lines (kind, SKU,
      batch, licence, unit and unit price equal) never beyond what they billed, amounts
      and VAT by the partial-credit rule, usage meters and ledger entries as the note's
      kind (whole reversal, price only, partial re-billing) says;
    * each invoice's quantities and prices are those of its ledger entries: units per
      batch, direct licences and renewed units at the price the entries recorded, and
      inferences over the allowance split by the SKU's tiers (a SKU without tiers bills
      none);
    * numbers are gapless per series and year, up to the sequence's last number, and a
      customer's uncredited invoices never overlap.

``deep``
    Each invoice is rated again from its ledger entries by the rules that issued it
    (:func:`billing.rating.invoice_lines`), with N counted again per SKU and
    maintenance again at the period end, and compared line by line. Prices come from
    what the entries recorded at sale; overage tiers from the catalogue as it is now
    (a tier price changed since an invoice was issued is reported as a difference).

A problem names the document, the line (its position, kind and SKU), and the stored and
expected values. Nothing here reads raw records.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.db.models import F, Q, Sum

from billing import ledger, pricing, rating, selectors
from billing.credit_checks import credit_problems
from billing.line_builders import maintenance_lines
from billing.models import (
    DocumentSequence,
    Invoice,
    InvoiceLine,
    InvoiceTax,
    InvoiceUsage,
    LedgerEntry,
)
from svccore import dates, money
from svccore.money import exact

EXAMPLES = 10  # problems listed per kind of check; the count is always complete

MICRO = Decimal("0.000001")
_LINE_FIELDS = ("kind", "sku", "batch_id", "license_id", "unit", "unit_price")


def limited(problems: list[str], what: str) -> list[str]:
    """The first EXAMPLES problems and how many more there are of ``what``."""
    if len(problems) <= EXAMPLES:
        return problems
    return problems[:EXAMPLES] + [f"... and {len(problems) - EXAMPLES} more {what} like these"]


def _m(value: Decimal, currency: Invoice | str) -> Decimal:
    """An amount in a message, as every surface prints it (``svccore.money``)."""
    return money.amount(value, currency if isinstance(currency, str) else currency.currency)


def _line_name(number: str, line: InvoiceLine) -> str:
    return f"{number} line {line.position} ({line.kind} {line.sku})"


def _arithmetic_problems(documents: dict[str, Invoice], lines: dict[str, list]) -> list[str]:
    amounts, totals = [], []
    for number, document in documents.items():
        # A credit note's amounts follow the partial-credit rule (billing.credit_checks).
        shown = lines.get(number, []) if document.kind == Invoice.Kind.INVOICE else []
        for line in shown:
            expected = pricing.line_amount(line.quantity, line.unit_price, document.currency)
            if line.amount != expected:
                amounts.append(
                    f"{_line_name(number, line)}: amount {_m(line.amount, document)} stored, "
                    f"{_m(expected, document)} "
                    f"expected ({line.quantity} x {line.unit_price} {document.currency})"
                )
        expected_total = sum((line.amount for line in lines.get(number, [])), Decimal("0.00"))
        if document.total != expected_total:
            totals.append(
                f"{number}: total {_m(document.total, document)} stored, "
                f"{_m(expected_total, document)} expected (the sum "
                f"of its {len(lines.get(number, []))} lines)"
            )
    return limited(amounts, "line amounts") + limited(totals, "totals")


def _tax_problems(documents: dict[str, Invoice], taxes: dict[str, list]) -> list[str]:
    """VAT (billing.vat): each row's tax is its taxable amount times its rate rounded
    half-up once; the rows' taxable amounts sum to the net total and their tax to the
    document's tax total (a credit note's rates and tax: billing.credit_checks). A document without
    rows (issued before VAT) must have a tax total of 0."""
    problems = []
    for number, document in documents.items():
        rows = sorted(taxes.get(number, []), key=lambda row: (row.category, row.rate))
        for row in rows if document.kind == Invoice.Kind.INVOICE else []:
            expected = pricing.money(row.taxable_amount * row.rate / 100, document.currency)
            if row.tax_amount != expected:
                problems.append(
                    f"{number} VAT {row.category} {row.rate} %: tax "
                    f"{_m(row.tax_amount, document)} stored, {_m(expected, document)} expected"
                )
        taxable = sum((row.taxable_amount for row in rows), Decimal(0))
        tax = sum((row.tax_amount for row in rows), Decimal(0))
        if rows and taxable != document.total:
            problems.append(
                f"{number}: VAT rows tax {_m(taxable, document)}, its net total is "
                f"{_m(document.total, document)}"
            )
        if tax != document.tax_total:
            problems.append(
                f"{number}: tax total {_m(document.tax_total, document)} stored, "
                f"{_m(tax, document)} expected (the sum of its VAT rows)"
            )
    return limited(problems, "VAT differences")


def _sequence_problems(documents: dict[str, Invoice], scoped: bool) -> list[str]:
    """Gapless numbers per series and year, none beyond the sequence's last."""
    problems = []
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    for document in documents.values():
        series = "INV" if document.kind == Invoice.Kind.INVOICE else "CN"
        if document.number != f"{series}-{document.year}-{document.seq:06d}":
            problems.append(
                f"{document.number} is numbered {series}-{document.year}-{document.seq:06d}"
            )
        seen[(series, document.year)].append(document.seq)
    last = {(row.series, row.year): row.last for row in DocumentSequence.objects.all()}
    for (series, year), numbers in sorted(seen.items()):
        top = last.get((series, year), 0)
        beyond = sorted(n for n in numbers if n > top)
        if beyond:
            problems.append(
                f"{series}-{year}: {len(beyond)} document(s) numbered beyond the last number "
                f"issued ({top}), first {series}-{year}-{beyond[0]:06d}: not issued here"
            )
        if not scoped and len(numbers) != top:
            problems.append(
                f"{series}-{year}: {len(numbers)} documents for numbers 1..{top} "
                f"({top - len(numbers)} missing)"
            )
    return limited(problems, "numbering problems")


def _overlap_problems(documents: dict[str, Invoice]) -> list[str]:
    """A customer's invoices in one currency that no credit note reverses whole cover disjoint
    periods (one invoice per currency and period, contract §6)."""
    credited = {d.credits_number for d in documents.values() if d.reissues}
    periods: dict[tuple[str, str], list[Invoice]] = defaultdict(list)
    for document in documents.values():
        if document.kind == Invoice.Kind.INVOICE and document.number not in credited:
            periods[document.customer_id, document.currency].append(document)
    problems = []
    for (customer_id, _currency), invoices in sorted(periods.items()):
        invoices.sort(key=lambda d: (d.period_start, d.number))
        for before, after in zip(invoices, invoices[1:], strict=False):
            if after.period_start < before.period_end:
                problems.append(
                    f"{after.number} ({dates.period(after.period_start, after.period_end)}) "
                    f"overlaps {before.number} "
                    f"({dates.period(before.period_start, before.period_end)}) of {customer_id}"
                )
    return limited(problems, "overlapping invoices")


def _entry_sums(scope: Q) -> dict[str, dict[tuple, list[int]]]:
    entries: dict[str, dict[tuple, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for row in (
        LedgerEntry.objects.filter(scope)
        .values("document_id", "kind", "sku", "batch_id", "unit_price", "late")
        .annotate(n=Sum("quantity"), r=Sum("records"))
        .order_by()
    ):
        key = (row["kind"], row["sku"], row["batch_id"], row["unit_price"], bool(row["late"]))
        entries[row["document_id"]][key][0] += row["n"]
        entries[row["document_id"]][key][1] += row["r"]
    return entries


def _quantity_problems(
    number: str,
    entries: dict,
    lines: list,
    meters: dict,
    catalogue: dict[str, dict[str, Any]],
) -> list[str]:
    """An invoice's quantities against its ledger entries."""
    billed: dict[tuple, int] = defaultdict(int)
    usage: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for (kind, sku, batch_id, unit_price, late), (n, records) in entries.items():
        if kind == LedgerEntry.Kind.ACTIVATION:
            billed[(InvoiceLine.Kind.UNIT_ACTIVATION.value, sku, batch_id, unit_price)] += n
        elif kind == LedgerEntry.Kind.DIRECT:
            billed[(InvoiceLine.Kind.DIRECT_LICENSE.value, sku, "", unit_price)] += n
        elif kind == LedgerEntry.Kind.RENEWAL:
            billed[(InvoiceLine.Kind.RENEWAL.value, sku, batch_id, unit_price)] += n
        elif kind == LedgerEntry.Kind.ADDON:
            # Days per grant, billed as a rounded share of its term: the deep check rates
            # each add-on line again from its grant's entries (_rerated_problems).
            continue
        elif kind == LedgerEntry.Kind.TRIAL_CONVERSION:
            billed[(InvoiceLine.Kind.TRIAL_CONVERSION.value, sku, batch_id, unit_price)] += n
        else:
            sums = usage[sku]
            sums[2 if late else 0] += n
            sums[3 if late else 1] += records
    invoiced: dict[tuple, int] = defaultdict(int)
    overage: dict[tuple[str, bool], Decimal] = defaultdict(Decimal)
    tier_lines: dict[tuple[str, bool], int] = defaultdict(int)
    for line in lines:
        if line.kind == InvoiceLine.Kind.UNIT_ACTIVATION:
            invoiced[(line.kind, line.sku, line.batch_id, line.unit_price)] += int(line.quantity)
        elif line.kind == InvoiceLine.Kind.DIRECT_LICENSE:
            invoiced[(line.kind, line.sku, "", line.unit_price)] += int(line.quantity)
        elif line.kind in (InvoiceLine.Kind.RENEWAL, InvoiceLine.Kind.TRIAL_CONVERSION):
            key = (line.kind, line.sku, line.batch_id, line.unit_price)
            invoiced[key] += int(line.quantity)
        elif line.kind in (InvoiceLine.Kind.METERED_OVERAGE, InvoiceLine.Kind.METERED_OVERAGE_LATE):
            key = (line.sku, line.kind == InvoiceLine.Kind.METERED_OVERAGE_LATE)
            overage[key] += line.quantity * 1000
            tier_lines[key] += 1
    problems = []
    for key in sorted(set(billed) | set(invoiced), key=str):
        if billed.get(key, 0) != invoiced.get(key, 0):
            what = "units of batch " + key[2] if key[2] else f"{key[1]} direct licences"
            if key[0] == InvoiceLine.Kind.RENEWAL:
                what = f"renewed {what}"
            elif key[0] == InvoiceLine.Kind.TRIAL_CONVERSION:
                what = f"converted trial {what}"
            what += f" at {exact(key[3], 2)}"
            problems.append(
                f"{number} bills {invoiced.get(key, 0)} {what} but its ledger entries hold "
                f"{billed.get(key, 0)}"
            )
    for sku in sorted(set(usage) | set(meters)):
        meter = meters.get(sku)
        sums = usage.get(sku, [0, 0, 0, 0])
        stored = (
            [meter.inferences, meter.records, meter.late_inferences, meter.late_records]
            if meter
            else [0, 0, 0, 0]
        )
        if sums != stored:
            problems.append(
                f"{number} rated {sku} usage of {stored[0]} + {stored[2]} late inferences but "
                f"its ledger entries hold {sums[0]} + {sums[2]}"
            )
            continue
        tiers = catalogue.get(sku, {}).get("overage_tiers", [])
        on_time = _tiered(max(Decimal(0), sums[0] - meter.allowance), tiers)
        overall = _tiered(max(Decimal(0), sums[0] + sums[2] - meter.allowance), tiers)
        for late, expected in ((False, on_time), (True, overall - on_time)):
            # Each tier line is rounded to a whole inference (0.001 thousand).
            slack = Decimal("0.5") * max(1, tier_lines[(sku, late)])
            if abs(overage[(sku, late)] - expected) > slack:
                problems.append(
                    f"{number} bills {overage[(sku, late)]:f} {sku} "
                    f"{'late ' if late else ''}inferences over the allowance; its ledger "
                    f"entries make {expected:.3f}"
                )
    return problems


def _tiered(overage: Decimal, tiers: list[dict[str, Any]]) -> Decimal:
    """The overage inferences the SKU's tiers bill (all of them, or none without tiers)."""
    return sum((n for _, n in pricing.overage_by_tier(overage, tiers)), Decimal(0))


def _rerated_problems(
    documents: dict[str, Invoice],
    lines: dict[str, list],
    meters: dict[str, dict],
    catalogue: dict[str, dict[str, Any]],
    scope: Q,
) -> list[str]:
    """``deep``: every invoice rated again from its ledger entries, line by line."""
    taken = ledger.taken_by_document(scope)
    problems = []
    for number, invoice in documents.items():
        if invoice.kind != Invoice.Kind.INVOICE:
            continue
        mine = taken.get(number, ledger.Taken())
        stored_meters = meters.get(number, {})
        units = {sku: meter.units for sku, meter in stored_meters.items()}
        if mine.meters:
            counted = selectors.billable_units_by_sku(
                customer_id=invoice.customer_id,
                start=invoice.period_start,
                end=invoice.period_end,
            )
            for sku, meter in sorted(stored_meters.items()):
                if counted.get(sku, 0) != meter.units:
                    problems.append(
                        f"{number} rated {sku}'s allowance for {meter.units} units; "
                        f"{counted.get(sku, 0)} were taken and not revoked in its period"
                    )
        period_days = (invoice.period_end - invoice.period_start) // dt.timedelta(days=1)
        expected = rating.invoice_lines(
            customer_id=invoice.customer_id,
            period_days=period_days,
            activations=mine.activations,
            directs=mine.directs,
            meters=mine.meters,
            renewals=mine.renewals,
            addons=mine.addons,
            conversions=mine.conversions,
            units=units,
            maintenance=(
                maintenance_lines(invoice.customer_id, invoice.period_end, catalogue)
                if period_days >= 365
                else []
            ),
            entries=catalogue,
        )
        # Maintenance is rated from the licences, not the ledger: only this currency's.
        expected = [line for line in expected if line["_currency"] == invoice.currency]
        for sku, meter in sorted(mine.meters.items()):
            stored = stored_meters.get(sku)
            # Stored to six decimals (a 31-day allowance is 666.666...).
            if stored is not None and abs(stored.allowance - meter.allowance) >= MICRO:
                problems.append(
                    f"{number}: {sku} allowance {stored.allowance} stored, "
                    f"{meter.allowance} expected for {stored.units} units over "
                    f"{period_days} days"
                )
        problems += _line_differences(number, lines.get(number, []), expected, invoice.currency)
    return limited(problems, "re-rating differences")


def _line_differences(number: str, stored: list, expected: list[dict], currency: str) -> list[str]:
    problems = []
    for position in range(1, max(len(stored), len(expected)) + 1):
        have = stored[position - 1] if position <= len(stored) else None
        want = expected[position - 1] if position <= len(expected) else None
        if have is None:
            problems.append(
                f"{number} line {position} ({want['kind']} {want['sku']}) is missing: "
                f"{want['quantity']} x {want['unit_price']} = {_m(want['amount'], currency)} "
                "expected"
            )
            continue
        if want is None:
            problems.append(
                f"{_line_name(number, have)}: {have.quantity} x {have.unit_price} = "
                f"{_m(have.amount, currency)} stored, no such line expected from its ledger "
                "entries"
            )
            continue
        stored_values = (have.kind, have.sku, have.batch_id, have.license_id, have.unit,
                         have.quantity, have.unit_price, have.amount)  # fmt: skip
        expected_values = (want["kind"], want["sku"], want.get("batch_id", ""),
                           want.get("license_id", ""), want["unit"], Decimal(want["quantity"]),
                           want["unit_price"], want["amount"])  # fmt: skip
        if stored_values != expected_values:
            problems.append(
                f"{_line_name(number, have)}: {have.quantity} {have.unit} x "
                f"{have.unit_price} = {_m(have.amount, currency)} stored, "
                f"{want['kind']} {want['sku']} "
                f"{want['quantity']} {want['unit']} x {_m(want['unit_price'], currency)} = "
                f"{_m(want['amount'], currency)} expected from its ledger entries"
            )
    return problems


def document_problems(*, customer_id: str | None = None, deep: bool = False) -> list[str]:
    """Every problem of the issued documents (of one customer, or all); see the module
    docstring."""
    scope = Q(customer_id=customer_id) if customer_id else Q()
    documents = {
        document.number: document
        for document in Invoice.objects.filter(scope).annotate(credits_number=F("credits__number"))
    }
    if not documents:
        return []
    of_invoice = Q(invoice__customer_id=customer_id) if customer_id else Q()
    lines: dict[str, list[InvoiceLine]] = defaultdict(list)
    for line in (
        InvoiceLine.objects.filter(of_invoice)
        .annotate(number=F("invoice__number"))
        .order_by("invoice_id", "position")
    ):
        lines[line.number].append(line)
    meters: dict[str, dict[str, InvoiceUsage]] = defaultdict(dict)
    for meter in InvoiceUsage.objects.filter(of_invoice).annotate(number=F("invoice__number")):
        meters[meter.number][meter.sku] = meter
    catalogue = rating.catalogue_entries()
    entries = _entry_sums(scope)
    quantities = []
    for number, document in sorted(documents.items()):
        mine = entries.get(number, {})
        if document.kind == Invoice.Kind.CREDIT_NOTE:
            continue
        quantities += _quantity_problems(
            number, mine, lines.get(number, []), meters.get(number, {}), catalogue
        )
    taxes: dict[str, list[InvoiceTax]] = defaultdict(list)
    for row in InvoiceTax.objects.filter(of_invoice).annotate(number=F("invoice__number")):
        taxes[row.number].append(row)
    problems = (
        _arithmetic_problems(documents, lines)
        + _tax_problems(documents, taxes)
        + limited(
            credit_problems(documents, lines, meters, taxes, entries), "credit-note differences"
        )
        + limited(quantities, "quantity differences")
        + _sequence_problems(documents, scoped=customer_id is not None)
        + _overlap_problems(documents)
    )
    if deep:
        problems += _rerated_problems(documents, lines, meters, catalogue, scope)
    return problems
