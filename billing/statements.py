"""Importing a bank statement (CAMT.053, :mod:`billing.camt053`): each booked credit is
matched to the invoices its remittance information names and recorded as payments of
them, once (the entry's bank id is kept with each payment it made).

An entry naming one invoice pays it whatever the amount (short: partly paid; over: a
credit). An entry naming several pays each its balance when the amount is exactly their
sum; otherwise it is applied to the first, and the report says so. An entry is reported
``matched``, ``already_imported`` (a re-import changes nothing) or ``unmatched`` (no
invoice number, unknown invoice, another currency), with what an operator needs to act.
The whole file is one transaction: nothing is half-imported; ``dry_run`` reports what an
import would do and rolls it back.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction

from audit.services import audited
from billing import balances, camt053
from billing.document_writes import locked_customer
from billing.models import Invoice
from billing.payment_models import Payment
from billing.payments import payment_write
from config.errors import InvalidInput
from svccore import dates, money

MATCHED = "matched"
ALREADY_IMPORTED = "already_imported"
UNMATCHED = "unmatched"


class _DryRun(Exception):
    pass


def _shown(value: Decimal, currency: str) -> Decimal:
    return money.amount(value, currency)


def _entry_row(entry: camt053.Entry, outcome: str, reason: str = "", **more: Any) -> dict:
    return {
        "entry_id": entry.entry_id,
        "outcome": outcome,
        "reason": reason,
        "amount": _shown(entry.amount, entry.currency),
        "currency": entry.currency,
        "booked_on": dates.iso_day(entry.booked_on),
        "debtor": entry.debtor,
        "remittance": " / ".join(entry.remittance)[:300],
        "invoice_numbers": entry.invoice_numbers(),
        "payments": [],
        **more,
    }


def _match(entry: camt053.Entry, now: dt.datetime | None, seen: set[str]) -> dict:
    if entry.entry_id in seen or Payment.objects.filter(bank_entry_id=entry.entry_id).exists():
        paid = list(
            Payment.objects.filter(bank_entry_id=entry.entry_id)
            .order_by("id")
            .values_list("invoice__number", flat=True)
        )
        return _entry_row(
            entry,
            ALREADY_IMPORTED,
            f"entry {entry.entry_id} was imported before"
            + (f" (paid {', '.join(paid)})" if paid else ""),
        )
    numbers = entry.invoice_numbers()
    if not numbers:
        return _entry_row(entry, UNMATCHED, "no invoice number (INV-YYYY-NNNNNN) in the remittance")
    found = {
        invoice.number: invoice
        for invoice in balances.with_balances(
            Invoice.objects.filter(number__in=numbers, kind=Invoice.Kind.INVOICE)
        )
    }
    unknown = [number for number in numbers if number not in found]
    known = [found[number] for number in numbers if number in found]
    if not known:
        return _entry_row(entry, UNMATCHED, f"unknown invoice {', '.join(unknown)}")
    same = [invoice for invoice in known if invoice.currency == entry.currency]
    if not same:
        others = ", ".join(f"{i.number} is in {i.currency}" for i in known)
        return _entry_row(
            entry, UNMATCHED, f"currency mismatch: the entry is in {entry.currency}, {others}"
        )
    for customer_id in sorted({invoice.customer_id for invoice in same}):
        locked_customer(customer_id)
    notes = []
    if unknown:
        notes.append(f"unknown invoice {', '.join(unknown)} left out")
    if len(same) < len(known):
        notes.append(
            "other currency left out: " + ", ".join(i.number for i in known if i not in same)
        )
    # Balances as of now, under the customers' locks.
    standing = {invoice.number: balances.standing_of(invoice, now, fresh=True) for invoice in same}
    owed = [max(standing[i.number].balance, Decimal(0)) for i in same]
    if len(same) > 1 and entry.amount == sum(owed) and all(owed):
        shares = list(zip(same, owed, strict=True))
    else:
        shares = [(same[0], entry.amount)]
        if len(same) > 1:
            notes.append(
                f"the amount is not the sum of the balances of {', '.join(i.number for i in same)} "
                f"({_shown(sum(owed), entry.currency)}): applied to {same[0].number}"
            )
    payments = []
    for invoice, share in shares:
        payment_write(
            invoice=invoice,
            amount=share,
            paid_on=entry.booked_on,
            reference=(entry.remittance[0] if entry.remittance else entry.entry_id)[:200],
            source=Payment.Source.CAMT053,
            bank_entry_id=entry.entry_id,
            note=(f"from {entry.debtor}" if entry.debtor else ""),
            now=now,
        )
        after = balances.standing_of(invoice, now, fresh=True)
        assert after is not None
        payments.append(
            {
                "invoice_number": invoice.number,
                "amount": _shown(share, entry.currency),
                "balance": _shown(after.balance, entry.currency),
                "state": after.state,
            }
        )
    seen.add(entry.entry_id)
    return _entry_row(entry, MATCHED, "; ".join(notes), payments=payments)


def _summary(result: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "sha256": arguments["sha256"],
        "bytes": arguments["size"],
        **{key: result[key] for key in ("statements", "matched", "already_imported",
                                        "unmatched", "skipped", "dry_run")},
    }  # fmt: skip


@dataclass(frozen=True)
class _Parsed:
    """The statements read from a file; short in the audit log (never the file)."""

    statements: list[camt053.Statement]

    def __str__(self) -> str:
        entries = sum(len(s.entries) for s in self.statements)
        return f"{len(self.statements)} statement(s), {entries} booked credit(s)"


def _statement_target(result: Any, arguments: dict[str, Any]) -> str:
    ids = ", ".join(s.statement_id for s in arguments["parsed"].statements)
    return ids[:128] or "camt053"


@audited("payment.import", target=_statement_target, detail=_summary)
def _statement_apply(
    *, parsed: _Parsed, sha256: str, size: int, dry_run: bool, now: dt.datetime | None
) -> dict[str, Any]:
    statements = parsed.statements
    report: dict[str, Any] = {}
    try:
        with transaction.atomic():
            seen: set[str] = set()
            rows = [
                _match(entry, now, seen) for statement in statements for entry in statement.entries
            ]
            report = {
                "statements": [
                    {
                        "statement_id": s.statement_id,
                        "account": s.account,
                        "entries": len(s.entries),
                    }
                    for s in statements
                ],
                "entries": rows,
                "matched": sum(row["outcome"] == MATCHED for row in rows),
                "already_imported": sum(row["outcome"] == ALREADY_IMPORTED for row in rows),
                "unmatched": sum(row["outcome"] == UNMATCHED for row in rows),
                "skipped": sum(s.skipped for s in statements),
                "dry_run": dry_run,
            }
            if dry_run:
                raise _DryRun
    except _DryRun:
        pass
    return report


def statement_import(
    *, data: bytes, dry_run: bool = False, now: dt.datetime | None = None
) -> dict[str, Any]:
    """Import CAMT.053 ``data``: the report of every booked credit entry. A malformed
    file is a 400 (InvalidInput) naming the problem, and nothing is imported. The audit
    entry (``payment.import``) names the statements, the file's SHA-256 and the counts,
    never the file."""
    try:
        statements = camt053.parse(data)
    except camt053.StatementError as problem:
        raise InvalidInput(f"bank statement refused: {problem}") from None
    return _statement_apply(
        parsed=_Parsed(statements),
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        dry_run=dry_run,
        now=now,
    )
