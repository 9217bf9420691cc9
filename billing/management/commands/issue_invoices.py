"""``python manage.py issue_invoices --period-days N [--customer ID] [--end DATE]``"""

from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from billing import services
from config.errors import ServiceError


def _end(text: str | None) -> dt.datetime | None:
    if text is None:
        return None
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--end must be a date YYYY-MM-DD, not {text!r}") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


class Command(BaseCommand):
    help = (
        "Issue the next invoice of every customer that owes something (or of one "
        "customer). A customer's invoices cover contiguous periods: each starts where the "
        "last one ended (the first N days before its end). Without --end the period ends "
        "at 00:00 UTC today and is issued once it is N days long, so a daily run issues "
        "every N days; --end DATE (no later than today) ends it at 00:00 UTC of DATE. "
        "Nothing is ever invoiced twice, so the command is safe to re-run."
    )

    def add_arguments(self, parser):
        parser.add_argument("--period-days", type=int, required=True, metavar="N")
        parser.add_argument("--customer", metavar="ID", help="only this customer")
        parser.add_argument(
            "--end",
            metavar="DATE",
            help="period ends at 00:00 UTC of DATE, today or earlier (default: today, once due)",
        )

    def handle(self, *args, period_days: int, customer: str | None, end: str | None, **options):
        try:
            results = services.invoice_issue_all(
                period_days=period_days, end=_end(end), customer_id=customer
            )
        except ServiceError as exc:
            raise CommandError(exc.detail) from None
        issued = 0
        for customer_id, invoice, note in results:
            if invoice is not None:
                issued += 1
                self.stdout.write(f"issued {note} ({customer_id}, {invoice.lines.count()} lines)")
            else:  # the reason, with the period and the numbers
                self.stdout.write(f"skipped {customer_id}: {note}")
        self.stdout.write(
            f"{issued} invoice(s) issued, {len(results) - issued} customer(s) skipped"
        )
