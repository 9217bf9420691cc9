from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.context import acting_from_cli
from config.errors import ServiceError
from signing import keyring
from signing.management.commands._keys import warn_if_configured
from signing.services import signing_key_retire


class Command(BaseCommand):
    help = (
        "Retire a signing key: it signs nothing more (a server configured with it as "
        "SVC_SIGNING_KEY_FILE refuses to sign), while the licences it signed keep verifying "
        "until they expire. For a compromised key use key_revoke instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("kid", metavar="KID", help="key id, as key_list shows it")

    def handle(self, *args, kid: str, **options):
        with acting_from_cli():
            try:
                key = signing_key_retire(kid=kid)
            except ServiceError as exc:
                raise CommandError(exc.detail) from None
        self.stdout.write(f"signing key {key.kid} is {keyring.key_state(key)}")
        warn_if_configured(self, key.kid)
