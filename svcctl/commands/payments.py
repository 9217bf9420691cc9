"""Payments against issued invoices (issue 43): record one, list an invoice's, import a
bank statement (CAMT.053)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from svcctl import EXIT_FAILED, EXIT_OK, OfflineError, output
from svcctl.client import segment
from svcctl.commands.base import Command, connect

STATEMENT_MAX_BYTES = 10 * 1024 * 1024  # the service's (billing.camt053.MAX_BYTES)
AMOUNT = re.compile(r"\A-?[0-9]{1,15}(\.[0-9]{1,3})?\Z")
STATES = {"partly_paid": "partly paid", "void": "void (credited)"}


def _amount(text: str) -> str:
    if not AMOUNT.match(text.strip()):
        raise argparse.ArgumentTypeError(f"must be an amount like 1190.00, not {text!r}")
    return text.strip()


def _day(text: str) -> str:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise argparse.ArgumentTypeError(f"must be a date YYYY-MM-DD, not {text!r}")
    return text


def _standing(invoice: dict) -> str:
    state = STATES.get(invoice["state"], invoice["state"])
    balance = output.money(invoice["balance"], invoice["currency"], grouped=True)
    return f"{invoice['invoice_number']}: {state}, balance {balance}"


def cmd_payment_record(args) -> int:
    client = connect(args)
    body = {"amount": args.amount, "reference": args.reference or "", "note": args.note or ""}
    if args.date:
        body["paid_on"] = args.date
    payment = client.post(f"invoices/{segment(args.number)}/payments", body)
    standing = client.get(f"invoices/{segment(args.number)}/payments")["invoice"]
    if args.json:
        output.print_json({"payment": payment, "invoice": standing})
        return EXIT_OK
    paid = output.money(payment["amount"], payment["currency"], grouped=True)
    print(f"recorded {paid} against {payment['invoice_number']} (paid on {payment['paid_on']})")
    print(_standing(standing))
    return EXIT_OK


def cmd_payments(args) -> int:
    result = connect(args).get(f"invoices/{segment(args.number)}/payments")
    if args.json:
        output.print_json(result)
        return EXIT_OK
    invoice = result["invoice"]
    output.table(
        ["paid on", "amount", "source", "reference", "recorded by", "note"],
        (
            [
                p["paid_on"],
                output.amount(p["amount"], p["currency"], grouped=True),
                p["source"],
                p["reference"],
                p["recorded_by"],
                p["note"],
            ]
            for p in result["payments"]
        ),
        align_right={1},
    )
    print(f"\n{_standing(invoice)}")
    return EXIT_OK


def _read_statement(path: str) -> str:
    try:
        raw = Path(path).read_bytes()[: STATEMENT_MAX_BYTES + 1]
    except OSError as exc:
        raise OfflineError(f"cannot read the statement {path}: {exc.strerror}") from None
    if len(raw) > STATEMENT_MAX_BYTES:
        raise OfflineError(f"{path} is larger than {STATEMENT_MAX_BYTES} bytes")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise OfflineError(f"{path} is not UTF-8 text: not a CAMT.053 statement") from None


def cmd_payment_import(args) -> int:
    text = _read_statement(args.file)
    report = connect(args).post("payments/camt053", {"statement": text, "dry_run": args.dry_run})
    if args.json:
        output.print_json(report)
        return EXIT_OK
    output.table(
        ["outcome", "entry", "booked", "amount", "debtor", "invoices paid / reason"],
        (
            [
                row["outcome"].replace("_", " "),
                row["entry_id"],
                row["booked_on"],
                output.money(row["amount"], row["currency"], grouped=True),
                row["debtor"],
                "; ".join(
                    [
                        f"{p['invoice_number']} {output.amount(p['amount'], row['currency'])}"
                        f" ({STATES.get(p['state'], p['state'])})"
                        for p in row["payments"]
                    ]
                    + ([row["reason"]] if row["reason"] else [])
                ),
            ]
            for row in report["entries"]
        ),
        align_right={3},
    )
    print(
        f"\n{report['matched']} matched, {report['already_imported']} already imported, "
        f"{report['unmatched']} unmatched, {report['skipped']} skipped (debits, not booked)"
        + ("\ndry run: nothing was imported" if report["dry_run"] else ""),
        file=sys.stderr,
    )
    return EXIT_FAILED if report["unmatched"] and args.strict else EXIT_OK


def _record_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("number", help="the invoice paid, INV-...")
    p.add_argument("--amount", type=_amount, required=True,
                   help="in the invoice's currency, exact to its minor unit; negative: a "
                   "correcting entry (needs --note)")  # fmt: skip
    p.add_argument("--date", type=_day, help="paid on, YYYY-MM-DD (default today)")
    p.add_argument("--reference", help="the bank's or customer's reference")
    p.add_argument("--note", help="why (needed for a correcting entry)")


def _payments_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("number", help="the invoice, INV-...")


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the CAMT.053 XML file your bank exports")
    p.add_argument("--dry-run", action="store_true", help="report what would be imported only")
    p.add_argument("--strict", action="store_true", help="exit 1 when an entry is unmatched")


COMMANDS = [
    Command(
        "payment-record",
        online=True,
        summary="record a payment against an invoice; prints its state and balance",
        handler=cmd_payment_record,
        description="Record a payment of --amount against invoice NUMBER (an overpayment "
        "is recorded as a credit). Payments are never edited: a negative --amount with "
        "--note is a correcting entry.",
        arguments=_record_arguments,
    ),
    Command(
        "payments",
        online=True,
        summary="an invoice's payments, state and balance",
        handler=cmd_payments,
        arguments=_payments_arguments,
    ),
    Command(
        "payment-import",
        online=True,
        summary="import a CAMT.053 bank statement (--dry-run reports only)",
        handler=cmd_payment_import,
        description="Import a CAMT.053 bank statement: each booked credit naming invoice "
        "numbers is recorded as their payment, once (a re-import changes nothing). Every "
        "entry is reported: matched, already imported or unmatched with the reason.",
        arguments=_import_arguments,
    ),
]
