"""``svcctl credit-note``: credit an issued invoice, whole or ``--line N=QTY``, showing
the credit note the service drafts before issuing it (issue 43 item 4)."""

from __future__ import annotations

import argparse
import sys

from svccore.line_choice import parse_line_argument
from svcctl import EXIT_FAILED, EXIT_OK, output
from svcctl.client import segment
from svcctl.commands.base import UsageError, connect


def _document_total(document: dict) -> str:
    return output.money(document["total"], document["currency"])


def _credit_body(args) -> dict:
    try:
        lines = [parse_line_argument(value) for value in args.line] if args.line else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    body: dict = {"reason": args.reason}
    if lines is not None:
        body["lines"] = [{"line": i["line"], "quantity": str(i["quantity"])} for i in lines]
    if args.rebill is not None:
        body["rebill"] = args.rebill
    return body


def _print_draft(draft: dict) -> None:
    currency = draft["currency"]
    for line in draft["lines"]:
        print(
            f"  {line['quantity']} {line['unit']} x {line['unit_price']} = "
            f"{output.money(line['amount'], currency)}  {line['description']}"
        )
    print(
        f"credit note of {draft['credits']}: {_document_total(draft)} net, "
        f"{output.money(draft['gross_total'], currency)} with VAT"
        + ("; its events wait again" if draft["rebill"] else "; a price credit")
    )


def cmd_credit_note(args) -> int:
    client = connect(args)
    body = _credit_body(args)
    path = f"invoices/{segment(args.number)}/credit-note"
    if args.dry_run:
        draft = client.post(f"{path}/draft", body)
        if args.json:
            output.print_json(draft)
        else:
            _print_draft(draft)
            print("nothing issued (--dry-run)", file=sys.stderr)
        return EXIT_OK
    if not args.yes:
        # The service drafts it: a credit note or nothing left to credit is refused here.
        draft = client.post(f"{path}/draft", body)
        invoice = client.get(f"invoices/{segment(args.number)}")
        question = (
            f"credit {invoice['number']} of {invoice['customer_name']} "
            f"({invoice['customer_id']}) {'in part' if draft['partial'] else 'in full'}, "
            f"{_document_total(draft)}"
            f"{'' if draft['rebill'] else ' (price only)'}?"
        )
        if not sys.stdin.isatty():
            raise UsageError(f"{question} Pass --yes to confirm (no terminal to ask on)")
        _print_draft(draft)
        if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing issued", file=sys.stderr)
            return EXIT_FAILED
    note = client.post(path, body)
    if args.json:
        output.print_json(note)
    else:
        print(
            f"issued {note['number']}: {_document_total(note)}, "
            f"{'crediting part of' if note['partial'] else 'reversing'} {note['credits']}; "
            + (
                "its credited events wait for the customer's next invoice"
                if note["rebill"]
                else "a price credit, its events stay billed"
            )
        )
    return EXIT_OK


def credit_note_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("number", help="the invoice to credit, INV-...")
    p.add_argument("--reason", required=True, help="why (printed on the credit note, audited)")
    p.add_argument(
        "--line",
        action="append",
        metavar="N=QTY",
        help="credit QTY of invoice line N (1-based, as printed); repeatable. Without it: "
        "all of the invoice that earlier credit notes left",
    )
    rebill = p.add_mutually_exclusive_group()
    rebill.add_argument(
        "--rebill",
        action="store_true",
        default=None,
        help="the credited events wait again for the next invoice (the default only for "
        "the whole of an invoice not credited before)",
    )
    rebill.add_argument(
        "--no-rebill", dest="rebill", action="store_false", help="a price credit only"
    )
    p.add_argument("--dry-run", action="store_true", help="show the credit note, issue nothing")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
