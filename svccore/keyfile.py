"""Signing-key files: create (mode 600, never silently overwritten) and load (refusing a
file readable by group or others). Free of Django: ``manage.py keygen`` and
``svcctl keygen`` are the same code."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


class KeyFileError(Exception):
    pass


def write_private_key(path: Path | str, *, force: bool = False) -> Ed25519PrivateKey:
    """Generate an Ed25519 key and write it as PKCS#8 PEM with mode 600.

    Without ``force`` an existing file is never touched. With it, the new key is written
    to a temporary file in the same directory and renamed over the old one, so a crash
    leaves either the old key or the new one, never half a key.
    """
    path = Path(path)
    if path.exists() and not force:
        raise KeyFileError(f"{path} already exists; pass --force to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key-")  # mkstemp creates mode 600
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    if force:
        os.replace(tmp, path)
    else:
        try:
            os.link(tmp, path)  # fails if the path appeared meanwhile: never overwrite
        finally:
            os.unlink(tmp)
    return key


def read_private_key(
    path: Path | str, *, what: str = "signing key", create: str = "python manage.py keygen"
) -> Ed25519PrivateKey:
    """The Ed25519 key in ``path``; a missing file names ``what`` it should be and the
    command that ``create``s one (the server's by default; ``svcctl`` names its own)."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise KeyFileError(f"no {what} at {path}; create one with `{create}`") from None
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise KeyFileError(
            f"signing key {path} has mode {mode:03o}: readable by group or others; "
            f"run `chmod 600 {path}`"
        )
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path} is not an unencrypted PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} holds a key that is not Ed25519")
    return key
