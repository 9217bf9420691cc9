"""The usage spool: closed metering periods waiting for upload.

A record is the usage of one fixed, aligned period (spec §2.5). Only closed periods are
spooled, so a period always goes to the service with the same ``(period_start,
period_end)`` and the service's deduplication makes re-sending safe (at-least-once). A
record leaves the spool only when a signed receipt covers it.

A record the service would refuse (outside :mod:`devices.bounds`, or not a record at
all: the file was edited) would fail every upload and hold back every record behind it,
so it is moved aside to ``spool.rejected.json``: kept for an operator, counted against
the quota, never sent.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .bounds import LAST_SECOND, MAX_COUNTER
from .errors import LicenseError
from .state import SET_ASIDE_FILE, corrupt, read_json

COUNTER_FIELDS = ("inferences", "frames", "stream_seconds", "events")
RECORD_FIELDS = ("period_start", "period_end", *COUNTER_FIELDS)
FORMAT = 1

Record = dict[str, int]


def is_record(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and set(record) == set(RECORD_FIELDS)
        and all(type(record[name]) is int and record[name] >= 0 for name in RECORD_FIELDS)
        and record["period_end"] > record["period_start"]
        and record["period_end"] <= LAST_SECOND
        and all(record[name] <= MAX_COUNTER for name in COUNTER_FIELDS)
    )


def period_key(record: Record) -> tuple[int, int]:
    return record["period_start"], record["period_end"]


class UsageSpool:
    """Spooled records in one JSON file, rewritten atomically on every change (once per
    closed period and once per successful upload, never per frame)."""

    def __init__(self, path: Path, write: Callable[[Path, Any], None]) -> None:
        self.path = Path(path)
        self._write = write
        self.aside_path = self.path.with_name(SET_ASIDE_FILE)
        data = read_json(self.path, {"format": FORMAT, "records": []})
        records = data.get("records") if isinstance(data, dict) else None
        if not isinstance(records, list):
            raise corrupt(self.path, "it holds no list of usage records")
        self.records: list[Record] = []
        refused: list[Any] = []
        seen: set[tuple[int, int]] = set()
        for record in records:
            if not is_record(record):
                refused.append(record)
            elif period_key(record) not in seen:
                seen.add(period_key(record))
                self.records.append(record)
        if refused:
            self.set_aside(refused, save=True)

    @property
    def aside(self) -> list[Any]:
        """Records moved aside as the service would refuse them (newest last)."""
        try:
            data = read_json(self.aside_path, None)
        except LicenseError:
            return []
        records = data.get("records") if isinstance(data, dict) else None
        return records if isinstance(records, list) else []

    def set_aside(self, refused: list[Any], *, save: bool = False) -> None:
        """Move ``refused`` to the set-aside file (they are not in ``records``)."""
        self._write(self.aside_path, {"format": FORMAT, "records": [*self.aside, *refused]})
        if save:
            self._save(self.records)

    def merge(self, found: list[Record]) -> bool:
        """Raise spooled counts to those of ``found`` for the same period (another file
        held more), and spool its periods not held; True when anything changed."""
        by_key = {period_key(r): dict(r) for r in self.records}
        changed = False
        for record in found:
            key = period_key(record)
            held = by_key.get(key)
            if held is None:
                by_key[key] = dict(record)
                changed = True
                continue
            for name in COUNTER_FIELDS:
                if record[name] > held[name]:
                    held[name] = record[name]
                    changed = True
        if changed:
            self._save(sorted(by_key.values(), key=period_key))
        return changed

    def __len__(self) -> int:
        return len(self.records)

    def keys(self) -> set[tuple[int, int]]:
        return {period_key(r) for r in self.records}

    def add(self, record: Record) -> None:
        """Spool a closed period. A period already spooled keeps the larger of each
        count (it was closed before a crash, or recovered from the journal)."""
        self.merge([record])

    def batch(self, limit: int) -> list[Record]:
        return [dict(r) for r in self.records[:limit]]

    def remove(self, done: list[Record]) -> None:
        keys = {period_key(r) for r in done}
        if keys:
            self._save([r for r in self.records if period_key(r) not in keys])

    def _save(self, records: list[Record]) -> None:
        self._write(self.path, {"format": FORMAT, "records": records})
        self.records = records
