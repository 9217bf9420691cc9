from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand

from config.admin.display import utc_time
from signing import keyring
from signing.selectors import signing_keys_list
from svccore import dates


def _window(key) -> str:
    """The certificate's validity in UTC (:mod:`svccore.dates`)."""
    if not key.certificate:
        return "not certified"
    if key.not_before and key.not_after:
        return dates.span(key.not_before, key.not_after)
    start = utc_time(key.not_before) or "any time"
    return f"{start} {dates.DASH} {utc_time(key.not_after) or 'no end'}"


class Command(BaseCommand):
    help = (
        "List the authority's signing keys: key id, use (online / offline air-gap), state "
        "(active: the key of SVC_SIGNING_KEY_FILE; standby: certified, not in use here; "
        "retired: signs nothing more, its tokens verify until they expire; revoked: nothing "
        "it signed verifies), fingerprint and certificate window (UTC)."
    )

    def handle(self, *args, **options):
        try:
            problem = keyring.active_key_problem()  # registers the configured key
        except ImproperlyConfigured as exc:
            problem = str(exc)
        rows = [
            (key.kid, key.use, keyring.key_state(key), key.fingerprint, _window(key))
            for key in signing_keys_list()
        ]
        header = ("KID", "USE", "STATE", "FINGERPRINT", "WINDOW")
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            cells = (str(value).ljust(width) for value, width in zip(row, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())
        if problem:
            self.stderr.write(f"warning: {problem}")
