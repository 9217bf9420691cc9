from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from devices import token as codec
from svccore.keyfile import read_private_key, write_private_key


def _secret_file(path: Path, nbytes: int) -> str:
    """Read a secret file, creating it (mode 600) with a fresh random value if missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(nbytes))
    return path.read_text().strip()


class Command(BaseCommand):
    help = (
        "Development set-up used by `make run`: create the signing key, admin key and "
        "secret key under var/ if missing (mode 600) and print what an operator needs."
    )

    def add_arguments(self, parser):
        parser.add_argument("--var", default="var", help="directory for development secrets")
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args, var="var", url="http://127.0.0.1:8000", **options):
        var_dir = Path(var)
        key_path = settings.SVC_SIGNING_KEY_FILE
        if not key_path.exists():
            write_private_key(key_path)
            self.stdout.write(f"created signing key {key_path} (mode 600)")
        public = read_private_key(key_path).public_key()
        _secret_file(var_dir / "secret-key", 48)
        admin_key = settings.SVC_ADMIN_KEY or _secret_file(var_dir / "admin-key", 32)
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
                    f"  key fingerprint {codec.key_fingerprint(public)}",
                    f"  public key     {codec.public_key_b64url(public)}",
                    "",
                ]
            )
        )
