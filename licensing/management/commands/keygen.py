from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from devices import token as codec
from svccore.keyfile import KeyFileError, write_private_key


class Command(BaseCommand):
    help = (
        "Create a new Ed25519 signing key (PKCS#8 PEM, mode 600) at SVC_SIGNING_KEY_FILE or "
        "--out, and print its key id (kid), public key and fingerprint. Refuses to overwrite "
        "without --force. With SVC_ROOT_KEYS set, the key signs only once a root has "
        "certified it offline and `manage.py key_install CERT` has installed the certificate."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", help="where to write the key (default: SVC_SIGNING_KEY_FILE)")
        parser.add_argument(
            "--force",
            action="store_true",
            help="replace an existing key: every licence signed by the old key stops verifying",
        )

    def handle(self, *args, out=None, force=False, **options):
        path = Path(out) if out else settings.SVC_SIGNING_KEY_FILE
        try:
            key = write_private_key(path, force=force)
        except KeyFileError as exc:
            raise CommandError(str(exc)) from None
        public = key.public_key()
        self.stdout.write(f"private key: {path} (mode 600)")
        self.stdout.write(f"public key (base64url): {codec.public_key_b64url(public)}")
        self.stdout.write(codec.public_key_pem(public).rstrip())
        self.stdout.write(f"fingerprint (sha256): {codec.key_fingerprint(public)}")
        self.stdout.write(f"key id (kid): {codec.key_id(public)}")
