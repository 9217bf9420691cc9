"""``python manage.py record_payment INV-... --amount 1190.00 [--date] [--reference]``."""

from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from billing import balances
from billing.payments import payment_record
from config.errors import ServiceError
from svccore import money


class Command(BaseCommand):
    help = (
        "Record a payment against an issued invoice (a negative amount with --note is a "
        "correcting entry); prints the invoice's state and balance."
    )

    def add_arguments(self, parser):
        parser.add_argument("number", help="the invoice, INV-YYYY-NNNNNN")
        parser.add_argument("--amount", required=True, help="in the invoice's currency")
        parser.add_argument("--date", type=dt.date.fromisoformat, help="paid on (default today)")
        parser.add_argument("--reference", default="", help="the bank's or customer's reference")
        parser.add_argument("--note", default="", help="why (needed for a correcting entry)")

    def handle(self, *args, number, amount, date, reference, note, **options):
        try:
            payment = payment_record(
                number=number, amount=amount, paid_on=date, reference=reference, note=note
            )
        except ServiceError as problem:
            raise CommandError(problem.detail) from None
        standing = balances.standing_of(payment.invoice)
        currency = payment.currency
        self.stdout.write(
            f"recorded {money.amount(payment.amount, currency)} {currency} against {number} "
            f"(paid on {payment.paid_on}): {standing.label}, balance "
            f"{money.amount(standing.balance, currency)} {currency}"
        )
