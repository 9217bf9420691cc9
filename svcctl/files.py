"""Output files, one rule for every option that writes one (``--out``, ``--public-out``,
``--token-out``, ``--csv``): an existing file is replaced only with ``--force``, and the
refusal names the file and the option.

A file holding a credential (a batch key, a licence token, a licence file) is written
with mode 600. Private keys are written by ``svccore.keyfile`` (mode 600 too);
certificates and public keys are public (``svccore.licensefile``, mode 644).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

from svcctl import OfflineError

SECRET_MODE = 0o600


def exists_message(path: Path | str, option: str) -> str:
    return f"{path} already exists; pass --force to replace it, or choose another {option} file"


def refuse_existing(path: Path | str | None, option: str, *, force: bool) -> None:
    """Refuse an existing output file unless ``force``, before any work is done: an
    online command checks before the service sells or issues anything. The write itself
    refuses again (``O_EXCL``) should the file appear meanwhile."""
    if path is None or force:
        return
    if os.path.lexists(path):
        raise OfflineError(exists_message(path, option))


def _open(path: Path | str, option: str, *, force: bool, mode: int) -> int:
    """A descriptor of a new file, or with ``force`` of the existing one (not truncated)."""
    flags = os.O_WRONLY | os.O_CREAT | (0 if force else os.O_EXCL)
    try:
        return os.open(path, flags, mode)
    except FileExistsError:
        raise OfflineError(exists_message(path, option)) from None
    except OSError as exc:
        raise OfflineError(f"cannot write {path} ({option}): {exc.strerror}") from None


def write_secret(path: Path | str, text: str, *, option: str, force: bool = False) -> None:
    """Write ``text`` (ASCII) to ``path`` with mode 600, whatever the umask and whatever
    the mode of a file replaced with ``force``.

    The mode is set before the old content is truncated and the new one written, so a
    file that cannot be made private is left as it was."""
    fd = _open(path, option, force=force, mode=SECRET_MODE)
    try:
        os.fchmod(fd, SECRET_MODE)
        os.ftruncate(fd, 0)
    except OSError as exc:
        os.close(fd)
        raise OfflineError(f"cannot write {path} ({option}): {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(text)


def create_text(path: Path | str, *, option: str, force: bool = False) -> TextIO:
    """Open a text file to write (UTF-8, ``newline=""`` as the csv module wants), new
    unless ``force``; a document, so the umask decides its mode."""
    fd = _open(path, option, force=force, mode=0o666)
    try:
        os.ftruncate(fd, 0)
    except OSError as exc:
        os.close(fd)
        raise OfflineError(f"cannot write {path} ({option}): {exc.strerror}") from None
    return os.fdopen(fd, "w", encoding="utf-8", newline="")
