"""``python manage.py prune_usage --older-than-months N [--dry-run]``"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing.partitions import is_partitioned, usage_prune
from config.admin.display import counted
from config.errors import ServiceError


class Command(BaseCommand):
    help = (
        "PostgreSQL: drop the monthly partitions of raw usage records for months that "
        "ended more than N months ago, each only when every record in it is billed and "
        "reconciled with its daily rollups (which stay). Also creates the partitions of "
        "the coming months; run it monthly."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than-months", type=int, required=True, metavar="N")
        parser.add_argument("--dry-run", action="store_true", help="check and report, drop nothing")

    def handle(self, *args, older_than_months: int, dry_run: bool, **options):
        if not is_partitioned():
            # Nothing to do, and why: a monthly job run against SQLite is not an error.
            self.stdout.write(
                "0 months pruned: usage records are not partitioned on this database "
                "(SQLite keeps one plain table, nothing to drop); pruning needs PostgreSQL"
            )
            return
        try:
            checks = usage_prune(older_than_months=older_than_months, dry_run=dry_run)
        except ServiceError as exc:
            raise CommandError(exc.detail) from None
        for check in checks:
            what = (
                f"{check.month:%Y-%m}: {check.records:,} records, {check.inferences:,} inferences"
            )
            if check.prunable:
                self.stdout.write(f"{'would prune' if dry_run else 'pruned'} {what}")
            else:
                self.stdout.write(f"kept {what}: {check.problem}")
        pruned = sum(check.prunable for check in checks)
        self.stdout.write(
            f"{counted(pruned, 'month')} {'prunable' if dry_run else 'pruned'}, "
            f"{len(checks) - pruned:,} kept"
        )
