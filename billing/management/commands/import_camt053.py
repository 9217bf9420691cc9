"""``python manage.py import_camt053 FILE [--dry-run]``: import a bank statement."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from billing.camt053 import MAX_BYTES
from billing.statements import statement_import
from config.errors import ServiceError


def report_lines(report: dict) -> list[str]:
    """The import report as lines an operator reads (also the console's)."""
    lines = []
    for row in report["entries"]:
        paid = ", ".join(
            f"{p['invoice_number']} {p['amount']} (balance {p['balance']}, {p['state']})"
            for p in row["payments"]
        )
        what = paid or row["reason"]
        extra = f"; {row['reason']}" if paid and row["reason"] else ""
        lines.append(
            f"{row['outcome']:<16} {row['entry_id']}  {row['booked_on']}  {row['amount']} "
            f"{row['currency']}  {row['debtor'] or '-'}: {what}{extra}"
        )
    lines.append(
        f"{report['matched']} matched, {report['already_imported']} already imported, "
        f"{report['unmatched']} unmatched, {report['skipped']} skipped (debits, not booked)"
        + (" - dry run: nothing imported" if report["dry_run"] else "")
    )
    return lines


class Command(BaseCommand):
    help = (
        "Import a CAMT.053 bank statement: booked credits naming invoice numbers are "
        "recorded as their payments, each entry once."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="the CAMT.053 XML file")
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would be imported; import nothing"
        )

    def handle(self, *args, file: str, dry_run: bool, **options):
        path = Path(file)
        try:
            if path.stat().st_size > MAX_BYTES:
                raise CommandError(f"{file} is over {MAX_BYTES // (1024 * 1024)} MB")
            data = path.read_bytes()
        except OSError as problem:
            raise CommandError(f"cannot read {file}: {problem.strerror}") from None
        try:
            report = statement_import(data=data, dry_run=dry_run)
        except ServiceError as problem:
            raise CommandError(problem.detail) from None
        for line in report_lines(report):
            self.stdout.write(line)
