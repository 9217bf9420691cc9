from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config.errors import SignerUnavailable
from devices import token as codec
from signing import pkcs11_token, signers
from svccore.keyfile import KeyFileError, write_private_key


class Command(BaseCommand):
    help = (
        "Create a new Ed25519 signing key (PKCS#8 PEM, mode 600) at SVC_SIGNING_KEY_FILE or "
        "--out, and print its key id (kid), public key and fingerprint. Refuses to overwrite "
        "without --force. With SVC_ROOT_KEYS set, the key signs only once a root has "
        "certified it offline and `manage.py key_install CERT` has installed the certificate. "
        "With SVC_SIGNER=pkcs11 the key pair is created inside the PKCS#11 token instead "
        "(sensitive, never extractable), labelled SVC_PKCS11_KEY_LABEL or --label."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", help="where to write the key (default: SVC_SIGNING_KEY_FILE)")
        parser.add_argument(
            "--label",
            help="SVC_SIGNER=pkcs11: the new key's label in the token (default: "
            "SVC_PKCS11_KEY_LABEL); a new label leaves the current key in place for a rotation",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="replace an existing key: every licence signed by the old key stops verifying",
        )

    def handle(self, *args, out=None, label=None, force=False, **options):
        if settings.SVC_SIGNER == signers.PKCS11:
            if out:
                raise CommandError("SVC_SIGNER=pkcs11: the key is made in the token; use --label")
            config = pkcs11_token.pkcs11_config(key_label=label)
            try:
                public = pkcs11_token.generate_key(config, force=force)
            except SignerUnavailable as exc:
                raise CommandError(exc.detail) from None
            self.stdout.write(
                f"private key: in {config.describe()}, labelled {config.key_label!r} "
                "(sensitive, not extractable)"
            )
        else:
            if label:
                raise CommandError("--label is for SVC_SIGNER=pkcs11; a key file takes --out")
            path = Path(out) if out else settings.SVC_SIGNING_KEY_FILE
            try:
                public = write_private_key(path, force=force).public_key()
            except KeyFileError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"private key: {path} (mode 600)")
        self.stdout.write(f"public key (base64url): {codec.public_key_b64url(public)}")
        self.stdout.write(codec.public_key_pem(public).rstrip())
        self.stdout.write(f"fingerprint (sha256): {codec.key_fingerprint(public)}")
        self.stdout.write(f"key id (kid): {codec.key_id(public)}")
