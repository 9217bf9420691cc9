from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit.context import acting_from_cli
from config.errors import ServiceError
from signing import keyring
from signing.services import signing_key_install


class Command(BaseCommand):
    help = (
        "Install a signing key's certificate (an SVCK1 line made offline by a root key): "
        "registers the key, or renews its certificate. The certificate must verify under a "
        "root of SVC_ROOT_KEYS and must not have expired; nothing is stored otherwise. "
        "Works for online keys (this server's) and offline air-gap minting keys alike. "
        "The file may be a licence file: its SVCK1 lines are installed one by one."
    )

    def add_arguments(self, parser):
        parser.add_argument("cert_file", metavar="CERT_FILE", help="file holding the certificate")

    def handle(self, *args, cert_file: str, **options):
        try:
            text = Path(cert_file).read_text(encoding="ascii")
        except FileNotFoundError:
            raise CommandError(f"certificate file {cert_file} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read certificate file {cert_file}: {exc}") from None
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        certificates = [line for line in lines if line.startswith("SVCK1.")] or lines[:1]
        if not certificates:
            raise CommandError(f"certificate file {cert_file} is empty")
        with acting_from_cli():
            for certificate in certificates:
                try:
                    key = signing_key_install(certificate=certificate)
                except ServiceError as exc:
                    raise CommandError(exc.detail) from None
                until = key.not_after or "no end"
                self.stdout.write(
                    f"installed certificate of signing key {key.kid} ({key.use}, "
                    f"valid {key.not_before}..{until}, now {keyring.key_state(key)})"
                )
