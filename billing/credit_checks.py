"""Credit notes checked against the invoices they credit: the credit-note half of
``manage.py reconcile``'s document checks (:mod:`billing.document_checks`).

Each invoice's credit notes are replayed in the order they were issued, by the rules
that issued them (:mod:`billing.credit_lines`, :func:`billing.vat.credit_tax_rows`):

* each credit line names a line of the invoice (its position), carries its kind, SKU,
  batch, licence, unit and unit price, and credits a quantity above 0 and at most what
  the earlier credit notes left of it, for the amount the rule gives (the rounded
  product, or exactly what remains for the line's last quantity);
* each credit note's VAT rows are the invoice's rates applied to its net, the last
  credit note taking exactly what remains of the invoice's tax;
* a credit note that reversed its whole invoice (neither partial nor price only)
  negates its usage meters and every one of its ledger entries; a price-only one has
  neither; a partial one that re-bills has no meters and reverses, per batch and price
  (or SKU and price), exactly the units of the unit-activation and direct-licence lines
  it credits.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from billing import vat
from billing.credit_lines import LineCredit, credit_amount, credited_position, shown
from billing.models import Invoice, InvoiceLine, LedgerEntry
from config.errors import ServiceError
from svccore import money

_LINE_FIELDS = ("kind", "sku", "batch_id", "license_id", "unit", "unit_price")


def _m(value: Decimal, currency: str) -> Decimal:
    return money.amount(value, currency)


def _events_of_lines(lines: list[InvoiceLine]) -> dict[tuple, int]:
    """The events a re-billing partial credit note's lines call for (positive counts)."""
    wanted: dict[tuple, int] = defaultdict(int)
    for line in lines:
        if line.kind == InvoiceLine.Kind.UNIT_ACTIVATION:
            wanted[
                (LedgerEntry.Kind.ACTIVATION.value, line.sku, line.batch_id, line.unit_price)
            ] += int(-line.quantity)
        elif line.kind == InvoiceLine.Kind.DIRECT_LICENSE:
            wanted[(LedgerEntry.Kind.DIRECT.value, line.sku, "", line.unit_price)] += int(
                -line.quantity
            )
    return {key: n for key, n in wanted.items() if n}


def _entries_without_late(entries: dict[tuple, list[int]]) -> dict[tuple, int]:
    found: dict[tuple, int] = defaultdict(int)
    for (kind, sku, batch_id, unit_price, _late), (n, _records) in entries.items():
        found[(kind, sku, batch_id, unit_price)] += n
    return {key: n for key, n in found.items() if n}


def _note_problems(
    note: Invoice,
    invoice: Invoice,
    states: dict[int, LineCredit],
    note_lines: list[InvoiceLine],
) -> list[str]:
    problems = []
    currency = invoice.currency
    for line in note_lines:
        position = credited_position(line)
        name = f"{note.number} line {line.position} ({line.kind} {line.sku})"
        state = states.get(position)
        if state is None:
            problems.append(f"{name} credits line {position}, which {invoice.number} lacks")
            continue
        original = state.line
        asked = -line.quantity
        if any(getattr(line, field) != getattr(original, field) for field in _LINE_FIELDS):
            problems.append(
                f"{name} is not a credit of {invoice.number} line {position} "
                f"({original.kind} {original.sku} at {original.unit_price})"
            )
        if asked <= 0 or asked > state.remaining_quantity:
            problems.append(
                f"{name} credits {shown(asked)} of {invoice.number} line {position}: billed "
                f"{shown(original.quantity)}, credited {shown(state.credited_quantity)} before it"
            )
            continue
        expected = credit_amount(state, asked, currency)
        if line.amount != -expected and note.reissues:
            problems.append(
                f"{name}: {line.quantity} x {line.unit_price} = {_m(line.amount, currency)} "
                f"stored, {-original.quantity} x {original.unit_price} = "
                f"{_m(-original.amount, currency)} expected (the negation of {invoice.number} "
                f"line {position}, {original.kind} {original.sku})"
            )
        elif line.amount != -expected:
            problems.append(
                f"{name}: {line.quantity} x {line.unit_price} = {_m(line.amount, currency)} "
                f"stored, {_m(-expected, currency)} expected (a credit of {invoice.number} line "
                f"{position}, {_m(state.remaining_amount, currency)} of whose amount remained)"
            )
        state.credited_quantity += asked
        state.credited_amount -= line.amount
    return problems


def credit_problems(
    documents: dict[str, Invoice],
    lines: dict[str, list[InvoiceLine]],
    meters: dict[str, dict],
    taxes: dict[str, list],
    entries: dict[str, dict[tuple, list[int]]],
) -> list[str]:
    """Every credit note (of the invoices in ``documents``) replayed against its
    invoice; see the module docstring. ``documents`` carry ``credits_number``."""
    notes_of: dict[str, list[Invoice]] = defaultdict(list)
    for document in documents.values():
        if document.kind == Invoice.Kind.CREDIT_NOTE and document.credits_number in documents:
            notes_of[document.credits_number].append(document)
    problems: list[str] = []
    for number, notes in sorted(notes_of.items()):
        invoice = documents[number]
        states = {line.position: LineCredit(line) for line in lines.get(number, [])}
        credited_tax: dict[tuple, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 2)
        invoice_taxes = sorted(taxes.get(number, []), key=lambda r: (r.category, r.rate))
        for index, note in enumerate(sorted(notes, key=lambda n: n.pk)):
            if (note.customer_id, note.currency) != (invoice.customer_id, invoice.currency):
                problems.append(
                    f"{note.number} is for {note.customer_id} in {note.currency}, {number} "
                    f"for {invoice.customer_id} in {invoice.currency}"
                )
            mine = lines.get(note.number, [])
            problems += _note_problems(note, invoice, states, mine)
            if note.reissues and note.total != -invoice.total:
                problems.append(
                    f"{note.number}: total {_m(note.total, note.currency)} stored, "
                    f"{_m(-invoice.total, note.currency)} expected (the negation of {number})"
                )
            final = all(state.remaining_quantity == 0 for state in states.values())
            if note.reissues and (index or not final):
                problems.append(
                    f"{note.number} reversed {number} whole, but "
                    + ("earlier credit notes credited it" if index else "not all of it")
                )
            try:
                expected = vat.credit_tax_rows(
                    invoice_taxes,
                    net=-note.total,
                    final=final,
                    credited=credited_tax,
                    currency=invoice.currency,
                )
            except ServiceError as exc:
                problems.append(f"{note.number}: {exc.detail}")
                expected = []
            stored = sorted(taxes.get(note.number, []), key=lambda r: (r.category, r.rate))
            have = [(r.category, r.rate, r.taxable_amount, r.tax_amount) for r in stored]
            want = [
                (r["category"], r["rate"], r["taxable_amount"], r["tax_amount"]) for r in expected
            ]
            if have != want:
                problems.append(
                    f"{note.number}'s VAT rows are not those of a credit of "
                    f"{_m(-note.total, note.currency)} of {number} at its rates"
                    + (" (the last credit takes exactly the tax that remains)" if final else "")
                )
            for row in stored:
                credited_tax[(row.category, row.rate)][0] -= row.taxable_amount
                credited_tax[(row.category, row.rate)][1] -= row.tax_amount
            problems += _events_problems(note, number, mine, meters, entries)
    return problems


def _events_problems(
    note: Invoice,
    number: str,
    note_lines: list[InvoiceLine],
    meters: dict[str, dict],
    entries: dict[str, dict[tuple, list[int]]],
) -> list[str]:
    """What a credit note returned to waiting, against what its kind says."""
    problems = []
    mine, theirs = entries.get(note.number, {}), entries.get(number, {})
    stored_meters = meters.get(note.number, {})
    if note.reissues:
        negated = {
            sku: (m.units, m.allowance, -m.inferences, -m.records, -m.late_inferences,
                  -m.late_records)
            for sku, m in meters.get(number, {}).items()
        }  # fmt: skip
        shown = {
            sku: (m.units, m.allowance, m.inferences, m.records, m.late_inferences, m.late_records)
            for sku, m in stored_meters.items()
        }
        if shown != negated:
            problems.append(f"{note.number}'s usage meters do not negate {number}'s")
        if {k: [-v[0], -v[1]] for k, v in theirs.items()} != dict(mine):
            problems.append(
                f"{note.number}'s ledger entries do not reverse exactly what {number} billed"
            )
        return problems
    if stored_meters:
        problems.append(f"{note.number} credits {number} in part but carries usage meters")
    wanted = {} if note.price_only else _events_of_lines(note_lines)
    reversed_events = _entries_without_late(mine)
    if reversed_events != {key: -n for key, n in wanted.items()}:
        what = "a price credit" if note.price_only else "a partial credit that re-bills"
        problems.append(
            f"{note.number} is {what} of {number}, but its ledger entries reverse "
            f"{sum(-n for n in reversed_events.values())} events where its lines call for "
            f"{sum(wanted.values())}"
        )
    return problems
