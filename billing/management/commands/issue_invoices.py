"""``python manage.py issue_invoices --period-days N [--customer ID] [--end DATE]``"""

from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from billing import services
from config.admin.display import counted
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
        "Nothing is ever invoiced twice, so the scheduled run is safe to re-run; an --end "
        "inside a customer's issued period is an overlap and exits 1 (the other customers "
        "are still invoiced). A customer whose invoice is refused (a ledger that disagrees "
        "with itself, a SKU missing from the catalogue) is named with the reason, the run "
        "goes on with the others, and the command exits 1 at the end."
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
        for result in results:
            if result.invoice is not None:
                issued += 1
                lines = result.invoice.lines.count()
                self.stdout.write(
                    f"issued {result.note} ({result.customer_id}, {counted(lines, 'line')})"
                )
            elif result.overlap or result.refused:
                self.stderr.write(f"refused {result.customer_id}: {result.note}")
            else:  # the reason, with the period and the numbers
                self.stdout.write(f"skipped {result.customer_id}: {result.note}")
        refused = [result.customer_id for result in results if result.refused]
        self.stdout.write(
            f"{counted(issued, 'invoice')} issued, "
            f"{counted(len(results) - issued - len(refused), 'customer')} skipped, "
            f"{counted(len(refused), 'customer')} refused"
        )
        overlaps = [result.customer_id for result in results if result.overlap]
        if refused:
            raise CommandError(
                f"{counted(len(refused), 'customer')} refused "
                f"({', '.join(refused[:5])}{', ...' if len(refused) > 5 else ''}): "
                "the reasons are above; every other customer was invoiced"
            )
        if overlaps:
            raise CommandError(
                f"--end {end} is inside an issued period of {counted(len(overlaps), 'customer')} "
                f"({', '.join(overlaps[:5])}{', ...' if len(overlaps) > 5 else ''}): "
                "no invoice overlaps another"
            )
