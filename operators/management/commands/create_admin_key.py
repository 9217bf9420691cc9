from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from audit.context import acting_from_cli, current_actor
from config import clock
from config.errors import ServiceError
from operators.roles import ROLES, parse_roles
from operators.services import operator_key_create, operator_key_revoke
from svccore import dates


class Command(BaseCommand):
    help = (
        "Create a named operator API key for X-Admin-Key (svcctl --admin-key) holding the "
        "roles of --scope, and print it once: only a keyed hash is stored, so it cannot be "
        "shown again. With --revoke, revoke the key of that name instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="who or what uses the key, e.g. alice or billing-cron")
        parser.add_argument(
            "--scope",
            metavar="ROLE[,ROLE...]",
            help=f"the roles the key holds, comma-separated: {', '.join(ROLES)} "
            "(required to create a key)",
        )
        parser.add_argument(
            "--expires-days",
            type=int,
            metavar="N",
            help="the key stops working N days from now (default: when revoked)",
        )
        parser.add_argument("--revoke", action="store_true", help="revoke the named key")

    def handle(self, *args, name: str, revoke: bool = False, **options):
        scope, days = options.get("scope"), options.get("expires_days")
        with acting_from_cli():
            try:
                if revoke:
                    operator_key_revoke(name=name)
                    self.stdout.write(f"operator key {name!r} revoked")
                    return
                if not scope:
                    raise CommandError(
                        f"name the key's roles: --scope ROLE[,ROLE...] of {', '.join(ROLES)}, "
                        f"e.g. create_admin_key {name} --scope viewer"
                    )
                try:
                    roles = parse_roles(scope)
                except ValueError as exc:
                    raise CommandError(str(exc)) from None
                if days is not None and not 1 <= days <= 3650:
                    raise CommandError(f"--expires-days must be 1 to 3650; got {days}")
                expires_at = clock.now() + dt.timedelta(days=days) if days else None
                row, key = operator_key_create(
                    name=name, roles=roles, expires_at=expires_at, created_by=current_actor().name
                )
            except ServiceError as exc:
                raise CommandError(exc.detail) from None
        self.stdout.write(key)
        until = f", expires {dates.moment(row.expires_at)}" if row.expires_at else ""
        self.stderr.write(
            f"operator key {row.name!r} created (prefix {row.prefix}; roles "
            f"{', '.join(row.roles)}{until}). This is the only time it is shown: store it "
            "now, e.g. export SVC_ADMIN_KEY=<key> for svcctl."
        )
