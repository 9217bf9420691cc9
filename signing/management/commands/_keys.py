"""What the signing-key commands share (a leading underscore: Django does not list it
as a command)."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand

from signing import keyring


def warn_if_configured(command: BaseCommand, kid: str) -> None:
    """Tell the operator when the key just retired or revoked is this host's own."""
    try:
        configured = keyring.active_kid()
    except ImproperlyConfigured:
        configured = ""
    if kid == configured:
        command.stderr.write(
            f"warning: {kid} is this host's SVC_SIGNING_KEY_FILE key: the server refuses "
            "to sign until SVC_SIGNING_KEY_FILE names another certified key"
        )
