"""``python manage.py credit_note INV-<year>-<seq> --reason TEXT``"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing import services
from config.errors import ServiceError
from svccore import dates, money


class Command(BaseCommand):
    help = (
        "Reverse an issued invoice with a credit note CN-<year>-<seq> (negated lines and "
        "total, its own gapless series). Everything the invoice billed waits again for "
        "the customer's next invoice; when it was the latest, the next invoice re-issues "
        "its period."
    )

    def add_arguments(self, parser):
        parser.add_argument("number", metavar="INVOICE", help="number of the invoice, INV-...")
        parser.add_argument("--reason", required=True, help="why (kept on the credit note)")

    def handle(self, *args, number: str, reason: str, **options):
        try:
            note = services.credit_note_issue(number=number, reason=reason)
        except ServiceError as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(
            f"issued {note.number}: {money.amount(note.total, note.currency)} {note.currency}, "
            f"reversing {number} "
            f"({note.customer_id}, {dates.period(note.period_start, note.period_end)})"
        )
