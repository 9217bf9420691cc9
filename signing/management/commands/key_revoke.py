from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.context import acting_from_cli
from config.errors import ServiceError
from signing.management.commands._keys import warn_if_configured
from signing.services import signing_key_revoke


class Command(BaseCommand):
    help = (
        "Revoke a signing key (compromised or lost): nothing it signed verifies on the "
        "server any more (other server processes follow within 5 seconds), and the signed "
        "revocation list names it (keys_revoked), so devices refuse it at their next sync. "
        "Permanent. Licences it signed must be issued again under another key."
    )

    def add_arguments(self, parser):
        parser.add_argument("kid", metavar="KID", help="key id, as key_list shows it")
        parser.add_argument(
            "--reason", required=True, help="why, e.g. 'laptop stolen'; recorded and audited"
        )

    def handle(self, *args, kid: str, reason: str, **options):
        with acting_from_cli():
            try:
                key = signing_key_revoke(kid=kid, reason=reason)
            except ServiceError as exc:
                raise CommandError(exc.detail) from None
        self.stdout.write(f"signing key {key.kid} revoked ({key.revoke_reason})")
        warn_if_configured(self, key.kid)
