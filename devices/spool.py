"""The usage spool: closed metering periods waiting for upload.

A record is the usage of one fixed, aligned period (spec §2.5). Only closed periods are
spooled, so a period always goes to the service with the same ``(period_start,
period_end)`` and the service's deduplication makes re-sending safe (at-least-once). A
record leaves the spool only after the service answered 200 for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .state import corrupt, read_json

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
    )


def period_key(record: Record) -> tuple[int, int]:
    return record["period_start"], record["period_end"]


class UsageSpool:
    """Spooled records in one JSON file, rewritten atomically on every change (once per
    closed period and once per successful upload, never per frame)."""

    def __init__(self, path: Path, write: Callable[[Path, Any], None]) -> None:
        self.path = Path(path)
        self._write = write
        data = read_json(self.path, {"format": FORMAT, "records": []})
        records = data.get("records") if isinstance(data, dict) else None
        if not isinstance(records, list) or not all(is_record(r) for r in records):
            raise corrupt(self.path, "records are not usage records")
        self.records: list[Record] = records

    def __len__(self) -> int:
        return len(self.records)

    def keys(self) -> set[tuple[int, int]]:
        return {period_key(r) for r in self.records}

    def add(self, record: Record) -> None:
        """Spool a closed period. A period already spooled is left as it is: it was
        closed before a crash and its counters are the ones the device reported."""
        if period_key(record) in self.keys():
            return
        self._save([*self.records, dict(record)])

    def batch(self, limit: int) -> list[Record]:
        return [dict(r) for r in self.records[:limit]]

    def remove(self, done: list[Record]) -> None:
        keys = {period_key(r) for r in done}
        if keys:
            self._save([r for r in self.records if period_key(r) not in keys])

    def _save(self, records: list[Record]) -> None:
        self._write(self.path, {"format": FORMAT, "records": records})
        self.records = records
