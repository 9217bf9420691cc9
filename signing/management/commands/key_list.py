from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand

from signing import keyring
from signing.selectors import signing_keys_list


class Command(BaseCommand):
    help = (
        "List the authority's signing keys: key id, use (online / offline air-gap), state "
        "(active: the key of SVC_SIGNING_KEY_FILE; standby: certified, not in use here; "
        "retired: signs nothing more, its tokens verify until they expire; revoked: nothing "
        "it signed verifies), fingerprint and certificate window (Unix seconds)."
    )

    def handle(self, *args, **options):
        try:
            problem = keyring.active_key_problem()  # registers the configured key
        except ImproperlyConfigured as exc:
            problem = str(exc)
        rows = [
            (key.kid, key.use, keyring.key_state(key), key.fingerprint, key.window())
            for key in signing_keys_list()
        ]
        header = ("KID", "USE", "STATE", "FINGERPRINT", "WINDOW")
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            cells = (str(value).ljust(width) for value, width in zip(row, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())
        if problem:
            self.stderr.write(f"warning: {problem}")
