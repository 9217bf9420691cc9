"""The licence public key compiled into this build of the device module.

A firmware build sets it with ``python -m devices vendor --pubkey FILE --out DIR``,
which writes a copy of the package whose ``PUBLIC_KEY`` is the unpadded base64url of the
raw 32-byte Ed25519 key (contract §2). ``None`` means this copy carries no key and every
:class:`devices.Engine` must be given ``public_key=`` (the ``license_pubkey`` setting).
"""

from __future__ import annotations

PUBLIC_KEY: str | None = None

# Root public keys (unpadded base64url) that endorse signing keys; empty: no root keyring.
ROOT_KEYS: tuple[str, ...] = ()
