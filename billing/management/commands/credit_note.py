"""``python manage.py credit_note INV-<year>-<seq> --reason TEXT [--line N=QTY ...]
[--rebill | --no-rebill] [--dry-run]``"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing import services
from config.errors import ServiceError
from svccore import dates, money
from svccore.line_choice import parse_line_argument


class Command(BaseCommand):
    help = (
        "Credit an issued invoice with a credit note CN-<year>-<seq> (negated lines and "
        "total, its own gapless series): the whole invoice (what earlier credit notes "
        "left), or --line POSITION=QUANTITY (repeatable; the line's number as printed). "
        "--rebill returns what it credits to waiting for the customer's next invoice "
        "(the default for the whole of an invoice not credited before, which re-issues "
        "its period when it was the latest); otherwise a price credit."
    )

    def add_arguments(self, parser):
        parser.add_argument("number", metavar="INVOICE", help="number of the invoice, INV-...")
        parser.add_argument("--reason", required=True, help="why (kept on the credit note)")
        parser.add_argument(
            "--line",
            action="append",
            default=None,
            metavar="N=QTY",
            help="credit QTY of invoice line N (1-based, as printed); repeatable",
        )
        rebill = parser.add_mutually_exclusive_group()
        rebill.add_argument(
            "--rebill", action="store_true", default=None, help="the credited events wait again"
        )
        rebill.add_argument(
            "--no-rebill", dest="rebill", action="store_false", help="a price credit only"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="show the credit note, issue nothing"
        )

    def handle(self, *args, number: str, reason: str, **options):
        try:
            lines = (
                [parse_line_argument(value) for value in options["line"]]
                if options["line"]
                else None
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        arguments = {
            "number": number,
            "reason": reason,
            "lines": lines,
            "rebill": options["rebill"],
        }
        try:
            if options["dry_run"]:
                draft = services.credit_note_draft(**arguments)
            else:
                note = services.credit_note_issue(**arguments)
        except ServiceError as exc:
            raise CommandError(exc.detail) from None
        if options["dry_run"]:
            currency = draft["currency"]
            for line in draft["lines"]:
                self.stdout.write(
                    f"  {line['quantity']} {line['unit']} x {line['unit_price']} = "
                    f"{money.amount(line['amount'], currency)}  {line['description']}"
                )
            self.stdout.write(
                f"would credit {money.amount(draft['total'], currency)} {currency} net, "
                f"{money.amount(draft['gross_total'], currency)} {currency} with VAT, of "
                f"{number}{'' if draft['rebill'] else ' (price only)'}; nothing issued"
            )
            return
        self.stdout.write(
            f"issued {note.number}: {money.amount(note.total, note.currency)} {note.currency}, "
            f"{'crediting part of' if note.partial else 'reversing'} {number} "
            f"({note.customer_id}, {dates.period(note.period_start, note.period_end)})"
            + ("" if not note.price_only else "; a price credit, its events stay billed")
        )
