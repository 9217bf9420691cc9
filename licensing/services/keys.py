"""What a signing key's change does to the revocation list, registered with
:mod:`signing.services` (which writes the keys and sits below licensing): the key
certificates the list carries change (``keys_version``), and a revoked key is an entry,
``KEY-<kid>``, numbered as a licence's. Imported by ``LicensingConfig.ready``."""

from __future__ import annotations

import datetime as dt

from licensing.services.licenses import head_bump, revocation_append
from signing.services import revocation_list_register


def keys_version_bump() -> None:
    head_bump(keys_version=True)


def key_revocation_append(kid: str, revoked_at: dt.datetime) -> None:
    revocation_append(entry=f"KEY-{kid}", revoked_at=revoked_at, until=0)


revocation_list_register(keys_changed=keys_version_bump, key_revoked=key_revocation_append)
