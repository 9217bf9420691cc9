from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.context import acting_from_cli
from config import clock
from config.errors import ServiceError
from config.seller import DEMO as DEMO_SELLER
from devices import token as codec
from devices.keys import KeyNotTrusted, parse_certificate
from signing.models import SigningKey
from signing.services import signing_key_install
from svccore.authority import sign_certificate
from svccore.keyfile import read_private_key, write_private_key
from svccore.timeunits import unix

ROOT_KEY = "root-key.pem"
ROOT_PUBLIC = "root-key.pub"
SIGNING_PUBLIC = "signing-key.pub"
# What the development server runs with; config/settings.py reads it (SVC_ENV_FILE), so
# `python manage.py ...` run by hand gets the server's secret, admin key and roots.
ENV_FILE = "dev.env"
# Console logins under `make run` take no second factor (docs/configuration.md,
# docs/operators.md); production's default stays on (config/settings.py).
DEV_REQUIRE_2FA = "0"


def _secret_file(path: Path, nbytes: int) -> str:
    """Read a secret file, creating it (mode 600) with a fresh random value if missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(nbytes))
    return path.read_text().strip()


def _private_file(path: Path, text: str) -> None:
    """Write a file only its owner may read (mode 600), replacing it if ``text`` differs."""
    if path.exists() and path.read_text() == text and stat.S_IMODE(path.stat().st_mode) == 0o600:
        return
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def _database_owner_only() -> None:
    """The development SQLite database (and its WAL files) mode 600: it holds licences,
    operator key hashes and console sessions."""
    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.sqlite3":
        return
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{database['NAME']}{suffix}")
        if path.is_file():
            os.chmod(path, 0o600)


def _public_file(path: Path, text: str) -> None:
    """Write a public file (mode 644) unless it already holds ``text``."""
    if path.exists() and path.read_text() == text:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


class Command(BaseCommand):
    help = (
        "Development set-up used by `make run` (after migrate): create the signing key "
        "(and its public key, var/signing-key.pub), a development root key "
        "(var/root-key.pem and .pub), admin key and secret key under var/ if missing "
        "(secrets mode 600), certify the signing key with that root and install the "
        "certificate, write var/dev.env (mode 600: the environment the development server "
        "runs with, which the settings read), make the SQLite database mode 600, and print "
        "what an operator needs. A real root key lives offline, never on a server."
    )

    def add_arguments(self, parser):
        parser.add_argument("--var", default="var", help="directory for development secrets")
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args, var="var", url="http://127.0.0.1:8000", **options):
        var_dir = Path(var)
        var_dir.mkdir(parents=True, exist_ok=True)
        key_path = settings.SVC_SIGNING_KEY_FILE
        if not key_path.exists():
            write_private_key(key_path)
            self.stdout.write(f"created signing key {key_path} (mode 600)")
        signing = read_private_key(key_path)
        public = signing.public_key()
        root_path = var_dir / ROOT_KEY
        if not root_path.exists():
            write_private_key(root_path)
            self.stdout.write(
                f"created development root key {root_path} (mode 600); a real root key is "
                "kept offline and only certifies signing keys, never on a server"
            )
        root = read_private_key(root_path)
        _public_file(var_dir / ROOT_PUBLIC, codec.public_key_pem(root.public_key()))
        _public_file(var_dir / SIGNING_PUBLIC, codec.public_key_pem(public))
        installed = self._certify(signing, root)
        secret_key = _secret_file(var_dir / "secret-key", 48)
        dev_admin_key = _secret_file(var_dir / "admin-key", 32)
        admin_key = settings.SVC_ADMIN_KEY or dev_admin_key
        _private_file(
            var_dir / ENV_FILE,
            "\n".join(
                [
                    "# Written by `make run` (manage.py dev_setup) on every run: what the",
                    "# development server runs with. config/settings.py reads this file when",
                    "# it exists (SVC_ENV_FILE); a variable set in the environment wins.",
                    f"SVC_SECRET_KEY={secret_key}",
                    f"SVC_ADMIN_KEY={dev_admin_key}",
                    f"SVC_ROOT_KEYS={var_dir / ROOT_PUBLIC}",
                    "SVC_SSL_REDIRECT=0",
                    "SVC_SECURE_COOKIES=0",
                    "SVC_HSTS_SECONDS=0",
                    # The server runs without SVC_DEBUG (production code paths), so the
                    # second factor, on by default there, is turned off here: the first
                    # console login needs no authenticator app (docs/configuration.md).
                    f"SVC_REQUIRE_2FA={DEV_REQUIRE_2FA}",
                    # An obvious demo seller (config.seller.DEMO): production start-up
                    # requires one, and nobody could take these invoices for real ones.
                    *(f"{name}={value}" for name, value in DEMO_SELLER.items()),
                    "",
                ]
            ),
        )
        _database_owner_only()
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"  service        {url}/",
                    f"  health         {url}/healthz",
                    f"  admin console  {url}/admin/  (python manage.py createsuperuser)",
                    f"  admin API      {url}/v1/admin/...  header X-Admin-Key",
                    f"  admin key      {admin_key}",
                    f"  signing key    {key_path}",
                    f"  its public key {var_dir / SIGNING_PUBLIC} (PEM)",
                    f"  key id (kid)   {codec.key_id(public)}{installed}",
                    f"  fingerprint    {codec.key_fingerprint(public)}  (/healthz public_key)",
                    f"  root key       {var_dir / ROOT_PUBLIC} (SVC_ROOT_KEYS; development only)",
                    f"  environment    {var_dir / ENV_FILE} (read by manage.py and the server)",
                    "",
                ]
            )
        )

    def _certify(self, signing, root) -> str:
        """Install a certificate of the signing key by the development root, unless one
        that verifies under it is installed already. Returns a note for the summary."""
        roots = {codec.key_id(root.public_key()): root.public_key()}
        kid = codec.key_id(signing.public_key())
        current = SigningKey.objects.filter(pk=kid).values_list("certificate", flat=True).first()
        if current:
            try:
                parse_certificate(current, roots)
                return ""
            except KeyNotTrusted:
                pass  # certified by another root: certify it by this one
        certificate = sign_certificate(
            root,
            signing.public_key(),
            issued_at=unix(clock.now()),
            not_before=0,  # development: covers every token this key ever signed
            not_after=0,
            use="online",
            issuer=settings.SVC_ISSUER,
        )
        with acting_from_cli():
            try:
                signing_key_install(
                    certificate=certificate, roots=[codec.public_key_b64url(root.public_key())]
                )
            except ServiceError as exc:
                raise CommandError(exc.detail) from None
        return " (certificate installed)"
