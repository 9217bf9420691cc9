"""Signing-key fixtures: a test root of trust and extra signing keys in temporary files.
Every test starts and ends with a fresh key registry, so keys installed, retired or
revoked in one test (rolled back with its transaction) are never remembered by the
next."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from devices import token as codec
from signing import keyring
from svccore.keyfile import read_private_key, write_private_key


@pytest.fixture(autouse=True)
def _fresh_key_registry():
    keyring.keys_changed()
    yield
    keyring.keys_changed()


@pytest.fixture
def root() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def with_roots(settings, root) -> Ed25519PrivateKey:
    """``SVC_ROOT_KEYS`` = the test root; returns the root's private key."""
    settings.SVC_ROOT_KEYS = [codec.public_key_b64url(root.public_key())]
    return root


@pytest.fixture
def new_key(tmp_path):
    """A signing key in a new file (mode 600): ``(path, private key)``."""
    counter = iter(range(1000))

    def make() -> tuple[Path, Ed25519PrivateKey]:
        path = tmp_path / f"signing-{next(counter)}.pem"
        write_private_key(path)
        return path, read_private_key(path)

    return make
