"""The keys compiled into this build of the device module.

A firmware build sets them with ``python -m devices vendor --root ROOT.pub [--pubkey
FILE] --out DIR``, which writes a copy of the package with this module filled in. Keys
are the unpadded base64url of the raw 32-byte Ed25519 key (contract §2).

``ROOT_KEYS``: the roots of trust. A root signs nothing but key certificates; a token is
accepted when the key that signed it (its ``kid``) is endorsed by one of these roots for
the token's signing time (``devices.keys``), so the authority can replace a signing key
without a firmware update. ``()`` means this copy trusts no root.

``PUBLIC_KEY``: one signing key trusted directly (builds from before roots of trust, and
tests). ``None`` means this copy carries no such key, and an :class:`devices.Engine` with
no root either must be given ``public_key=`` (the ``license_pubkey`` setting).
"""

from __future__ import annotations

ROOT_KEYS: tuple[str, ...] = ()
PUBLIC_KEY: str | None = None
