from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.context import acting_from_cli
from config.errors import ServiceError
from operators.second_factor import second_factor_reset


class Command(BaseCommand):
    help = (
        "Remove every second factor (authenticator and recovery codes) of a console user, "
        "who then sets up an authenticator again at the next login. For the host's "
        "administrator when no key administrator can reset it in the console; audited."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", help="the console user's name")

    def handle(self, *args, username: str, **options):
        with acting_from_cli():
            try:
                removed = second_factor_reset(username=username)
            except ServiceError as exc:
                raise CommandError(exc.detail) from None
        self.stdout.write(
            f"second factor of {username!r} reset: {removed} device(s) removed; they set up "
            "an authenticator again at their next login"
        )
