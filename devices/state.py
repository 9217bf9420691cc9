"""Crash-safe JSON files in an engine's state directory.

Every write goes to a temporary file in the same directory, is fsynced, renamed over the
target with ``os.replace`` and the directory is fsynced, so after a crash or power cut a
reader sees either the old or the new file, never a torn one. One state directory
belongs to one engine: :class:`DirectoryLock` holds an exclusive lock on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from . import jsonsafe
from .errors import Code, LicenseError

STATE_FILE = "state.json"
SPOOL_FILE = "spool.json"
STATUS_FILE = "status.json"  # signed licence statuses (devices.documents, SVCS1)
JOURNAL_FILE = "usage.journal"  # append-only copy of unsent usage (devices.journal)
SET_ASIDE_FILE = "spool.rejected.json"  # records the service would refuse, kept
KEYS_FILE = "keys.json"
TOKEN_FILE = "license.token"  # noqa: S105 - a file name, not a secret
LOCK_FILE = ".lock"
TEMP_SUFFIX = ".tmp"
# No state file this module writes comes near this (a year of hourly records is ~1 MB).
MAX_STATE_BYTES = 16 << 20
# A temporary file older than this was left by a crash mid-write; nobody will finish it.
STALE_TEMP_SECONDS = 60


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; a no-op where directories cannot
    be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (temp file, fsync,
    os.replace, fsync directory). The file is created with mode 600."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)


def write_json(path: Path, value: Any) -> None:
    data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")
    atomic_write_bytes(path, data)


def read_json(path: Path, default: Any = None) -> Any:
    """Parsed content of ``path``, or ``default`` when it does not exist.

    A file that does not parse was not written by this module (writes are atomic), so
    it is reported rather than silently reset: resetting would hand back quota.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return default
    except OSError as exc:
        raise LicenseError(
            f"state file {path} cannot be read: {exc.strerror or exc}", code=Code.STATE_UNREADABLE
        ) from None
    try:
        return jsonsafe.loads(data, max_bytes=MAX_STATE_BYTES, what="content")
    except jsonsafe.JSONRefused as exc:
        raise corrupt(path, str(exc)) from None


def corrupt(path: Path, why: str) -> LicenseError:
    return LicenseError(
        f"state file {path} is damaged ({why}); it was not written by this module",
        code=Code.STATE_CORRUPT,
    )


def sweep_temp_files(directory: Path, *, now: float | None = None) -> None:
    """Remove temporary files that a crash left behind mid-write."""
    cutoff = (time.time() if now is None else now) - STALE_TEMP_SECONDS
    for path in Path(directory).glob(f".*{TEMP_SUFFIX}"):
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < cutoff:
                path.unlink()


class DirectoryLock:
    """An exclusive ``flock`` on ``state_dir/.lock``, held while the engine lives. The
    kernel drops it when the process dies, so a crash never leaves the directory locked.
    (Where ``fcntl`` does not exist, e.g. Windows, there is no lock.)"""

    def __init__(self, directory: Path) -> None:
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return
        path = Path(directory) / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise LicenseError(
                f"cannot open {path}: {exc.strerror or exc}", code=Code.STATE_UNREADABLE
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LicenseError(
                f"another engine is using {directory}; one engine per state directory",
                code=Code.STATE_LOCKED,
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
