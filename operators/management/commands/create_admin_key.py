from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.context import acting_from_cli, current_actor
from config.errors import ServiceError
from operators.services import operator_key_create, operator_key_revoke


class Command(BaseCommand):
    help = (
        "Create a named operator API key for X-Admin-Key (svcctl --admin-key) and print it "
        "once: only a keyed hash is stored, so it cannot be shown again. "
        "With --revoke, revoke the key of that name instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="who or what uses the key, e.g. alice or billing-cron")
        parser.add_argument("--revoke", action="store_true", help="revoke the named key")

    def handle(self, *args, name: str, revoke: bool = False, **options):
        with acting_from_cli():
            try:
                if revoke:
                    operator_key_revoke(name=name)
                    self.stdout.write(f"operator key {name!r} revoked")
                    return
                row, key = operator_key_create(name=name, created_by=current_actor().name)
            except ServiceError as exc:
                raise CommandError(exc.detail) from None
        self.stdout.write(key)
        self.stderr.write(
            f"operator key {row.name!r} created (prefix {row.prefix}). This is the only time "
            "it is shown: store it now, e.g. export SVC_ADMIN_KEY=<key> for svcctl."
        )
