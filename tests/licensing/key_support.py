"""Helpers of the signing-key tests: key certificates by a test root, installing them
through ``manage.py key_install``, and tokens as issued before key ids."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command

from devices import token as codec
from svccore.authority import sign_certificate


def certificate(
    root: Ed25519PrivateKey,
    key,
    *,
    use: str = "online",
    not_before: int = 0,
    not_after: int = 0,
) -> str:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return sign_certificate(
        root,
        public,
        issued_at=int(time.time()),
        not_before=not_before,
        not_after=not_after,
        use=use,
        issuer="svc-test",
    )


def install(tmp_path: Path, text: str, name: str = "key.cert") -> str:
    """``manage.py key_install`` of a certificate; returns its output."""
    path = tmp_path / name
    path.write_text(text + "\n")
    out = io.StringIO()
    call_command("key_install", str(path), stdout=out)
    return out.getvalue()


def legacy_token(claims: dict, key: Ed25519PrivateKey) -> str:
    """A token as issued before key ids: no ``kid`` claim."""
    payload = json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()
    signing_input = f"SVC1.{codec.b64url_encode(payload)}"
    signature = key.sign(signing_input.encode("ascii"))
    return f"{signing_input}.{codec.b64url_encode(signature)}"
