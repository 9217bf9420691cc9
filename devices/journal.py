"""The usage journal (``state_dir/usage.journal``): an append-only second copy of the
usage a device has not yet seen receipted, and of the receipt that proves the rest.

``spool.json`` holds the closed periods and ``state.json`` the open period and the last
signed usage receipt; each is rewritten whole. The journal gets a line appended at every
checkpoint whose counts changed, at every period close and at every receipt, so any
ONE of the three files can be deleted or edited without losing usage or returning
quota: on load the engine takes, for each period, the largest counts any file holds,
and the newest receipt that verifies. Counts within a period only ever grow, so the
largest is the truest; a larger count than happened can only bill the device's owner.

One JSON object per line, newline-terminated::

    {"u": [period_start, period_end, inferences, frames, stream_seconds, events], "h": hwm}
    {"r": "<SVCU1 usage receipt>"}

A line torn by a crash mid-append, and any line that does not parse, is skipped. The
journal is rewritten atomically (receipt, then the unsent periods) after a receipt is
applied and whenever it grows past :data:`COMPACT_BYTES`.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from . import jsonsafe
from .bounds import LAST_SECOND, MAX_COUNTER
from .spool import COUNTER_FIELDS, RECORD_FIELDS, Record, period_key
from .state import atomic_write_bytes, fsync_directory

COMPACT_BYTES = 256 << 10  # about an hour of one line a second, then rewritten
MAX_BYTES = 16 << 20  # a longer file was not written by this module: only its head is read
MAX_LINE_BYTES = 64 << 10  # a receipt of 1000 records is about 40 KB


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("ascii") + b"\n"


def usage_line(record: Record, hwm: int) -> bytes:
    return _line({"u": [record[name] for name in RECORD_FIELDS], "h": hwm})


def receipt_line(text: str) -> bytes:
    return _line({"r": text})


def _record(values: Any) -> Record | None:
    if not (
        isinstance(values, list)
        and len(values) == len(RECORD_FIELDS)
        and all(type(v) is int and 0 <= v <= LAST_SECOND for v in values[:2])
        and all(type(v) is int and 0 <= v <= MAX_COUNTER for v in values[2:])
        and values[1] > values[0]
    ):
        return None
    return dict(zip(RECORD_FIELDS, values, strict=True))


def merge(into: dict[tuple[int, int], Record], record: Record) -> bool:
    """Fold ``record`` into ``into`` (largest count per field); True when it grew."""
    key = period_key(record)
    held = into.get(key)
    if held is None:
        into[key] = dict(record)
        return True
    grew = False
    for name in COUNTER_FIELDS:
        if record[name] > held[name]:
            held[name] = record[name]
            grew = True
    return grew


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.size = 0

    def load(self) -> tuple[dict[tuple[int, int], Record], list[str], int]:
        """``(records by period, receipt texts (not verified), high-water mark)``; an
        unreadable file is empty (the other two files hold the same usage)."""
        records: dict[tuple[int, int], Record] = {}
        receipts: list[str] = []
        hwm = 0
        try:
            with open(self.path, "rb") as fh:
                data = fh.read(MAX_BYTES)
        except OSError:
            return records, receipts, hwm
        self.size = len(data)
        for raw in data.split(b"\n"):
            if not raw or len(raw) > MAX_LINE_BYTES or raw[:1] != b"{":
                continue
            try:
                value = jsonsafe.loads(raw, max_bytes=MAX_LINE_BYTES)
            except jsonsafe.JSONRefused:
                continue
            if not isinstance(value, dict):
                continue
            if isinstance(value.get("r"), str):
                receipts.append(value["r"])
                continue
            record = _record(value.get("u"))
            if record is not None:
                merge(records, record)
                mark = value.get("h")
                if type(mark) is int and 0 <= mark <= LAST_SECOND:
                    hwm = max(hwm, mark)
        return records, receipts, hwm

    def append(self, data: bytes) -> None:
        """Append lines durably (the caller decides what a failure costs)."""
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_directory(self.path.parent)
        self.size += len(data)

    def rewrite(self, data: bytes) -> None:
        atomic_write_bytes(self.path, data)
        self.size = len(data)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.size = 0
