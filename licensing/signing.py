"""The server's signing key. The private key is loaded from ``SVC_SIGNING_KEY_FILE`` into
this process only; it is never logged, returned or written anywhere else."""

from __future__ import annotations

import threading
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from devices import documents
from devices import token as codec
from svccore.keyfile import KeyFileError, read_private_key

_lock = threading.Lock()
_cache: dict[str, Any] = {}


def signing_key() -> Ed25519PrivateKey:
    path = str(settings.SVC_SIGNING_KEY_FILE)
    with _lock:
        if _cache.get("path") != path:
            try:
                key = read_private_key(path)
            except KeyFileError as exc:
                raise ImproperlyConfigured(str(exc)) from None
            _cache.update(path=path, key=key, fingerprint=codec.key_fingerprint(key))
        return _cache["key"]


def public_key():
    return signing_key().public_key()


def public_key_fingerprint() -> str:
    signing_key()
    return _cache["fingerprint"]


def sign(claims: dict[str, Any]) -> str:
    return codec.encode_token(claims, signing_key())


def verify(token: str) -> dict[str, Any]:
    """Claims of a token this authority's key signed; raises ``devices.BadSignature``."""
    return codec.verify_token(token, public_key())


def sign_document(prefix: str, payload: dict[str, Any]) -> str:
    """Sign a revocation-list page or usage receipt (``devices.documents``)."""
    return documents.sign_document(prefix, payload, signing_key())
