"""``python manage.py export_invoices --format csv|json --out FILE [--since DATE]``"""

from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from billing import exports
from billing.models import Invoice
from config.admin.display import counted


class Command(BaseCommand):
    help = (
        "Export issued invoices and credit notes (CN-..., negative), one row per line "
        "(number, customer, period, currency, kind, SKU, quantity, unit price, amount), "
        "as CSV or JSON, in the order they were issued."
    )

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=["csv", "json"], required=True)
        parser.add_argument(
            "--out", required=True, metavar="FILE", help="file to write ('-': stdout)"
        )
        parser.add_argument(
            "--since",
            metavar="DATE",
            help="only invoices issued on or after DATE (YYYY-MM-DD, UTC)",
        )

    def handle(self, *args, format: str, out: str, since: str | None, **options):
        invoices = Invoice.objects.order_by("issued_at", "id")  # credit notes in turn
        if since is not None:
            try:
                day = dt.date.fromisoformat(since)
            except ValueError:
                raise CommandError(f"--since must be a date YYYY-MM-DD, not {since!r}") from None
            invoices = invoices.filter(
                issued_at__gte=dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
            )
        write = exports.write_csv if format == "csv" else exports.write_json
        rows = exports.invoice_rows(invoices)
        if out == "-":
            self.stdout.ending = ""  # the writers end their own lines
            count = write(rows, self.stdout)
        else:
            try:
                with open(out, "w", encoding="utf-8", newline="") as handle:
                    count = write(rows, handle)
            except OSError as exc:
                raise CommandError(f"cannot write {out}: {exc.strerror}") from None
        why = ""
        if not count:
            when = "yet" if since is None else f"on or after {since}"
            why = f" (no invoice or credit note has been issued {when})"
        # On stderr, since --out - writes the export to stdout; a report, not an error.
        self.stderr.write(f"{counted(count, 'invoice line')} written to {out}{why}", style_func=str)
