"""The licence file: what an offline-minted licence travels as.

One ASCII line per item: the SVC1 token first, then the key certificates (``SVCK1``,
``devices.keys``) a device needs to trust the key that signed it. A file holding only
the token (every older licence and token file) is a licence file with no certificates.
Blank lines and surrounding whitespace are ignored. Free of Django: ``svcctl`` writes
and reads it, and the server can share it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from devices import keys

CERT_PREFIX = keys.CERT_PREFIX + "."


class LicenseFileError(ValueError):
    """A file that is not a licence file, or that cannot be read or written."""


@dataclass(frozen=True)
class LicenseFile:
    token: str
    certificates: tuple[str, ...] = ()

    def text(self) -> str:
        return "".join(line + "\n" for line in (self.token, *self.certificates))


def parse(text: str, *, source: str = "licence file") -> LicenseFile:
    """Split a licence file into its token and certificate lines (not verified).

    The first line is taken as the token whatever it holds, so the token codec reports
    what is wrong with it; only the lines after it must be certificates."""
    token, rest = keys.split_license_file(text)
    if not token:
        raise LicenseFileError(f"{source} is empty")
    strays = [n for n, line in enumerate(rest, start=2) if not line.startswith(CERT_PREFIX)]
    if strays:
        raise LicenseFileError(
            f"{source}: line {strays[0]} is not a key certificate ({CERT_PREFIX}...); a "
            "licence file holds the token, then certificates, one per line"
        )
    return LicenseFile(token=token, certificates=tuple(rest))


def read(path: Path | str) -> LicenseFile:
    try:
        text = Path(path).read_text(encoding="ascii")
    except FileNotFoundError:
        raise LicenseFileError(f"token file {path} does not exist") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise LicenseFileError(f"cannot read token file {path}: {exc}") from None
    return parse(text, source=str(path))


def write(path: Path | str, license: LicenseFile, *, force: bool = False) -> None:
    """Write a licence file with mode 600 whatever the umask: its token is the device's
    credential (``Authorization: Bearer`` on usage and refresh). An existing file is
    replaced only with ``force``."""
    write_text(path, license.text(), force=force, mode=0o600)


def write_text(path: Path | str, text: str, *, force: bool = False, mode: int = 0o644) -> None:
    """Write a small file (a public one by default: a certificate, a public key) with
    exactly ``mode``, whatever the umask: a public key others may rewrite would be as bad
    as a secret others may read. Never silently overwrite."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | (0 if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        raise LicenseFileError(f"{path} already exists; pass --force to replace it") from None
    except OSError as exc:
        raise LicenseFileError(f"cannot write {path}: {exc.strerror}") from None
    try:
        os.fchmod(fd, mode)  # before the old content goes, and whatever the umask made
        os.ftruncate(fd, 0)
    except OSError as exc:
        os.close(fd)
        raise LicenseFileError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(text)
