"""The usage spool: closed metering periods waiting for upload.

A record is the usage of one fixed, aligned period (spec §2.5). Only closed periods are
spooled, so a period always goes to the service with the same ``(period_start,
period_end)`` and the service's deduplication makes re-sending safe (at-least-once). A
record leaves the spool only when a signed receipt covers it.

A record the service would refuse (outside :mod:`devices.bounds`, or not a record at
all: the file was edited) would fail every upload and hold back every record behind it,
so it is moved aside to ``spool.rejected.json`` (``records``): kept for an operator,
never sent.

The set-aside rule for delivered usage (contract §7), said the same in docs/devices.md:
a spooled record is deleted only when a signed receipt for its own upload holds exactly
the counts it sent. When the receipt holds other counts for its period (a conflict: the
service already had that licence, device and period with other counts) or refuses it
for good (before the licence's life), the record moves aside to the same file
(``conflicts``, with the licence it was sent for, the counts the receipt held and why),
is reported by ``sync`` (``conflicts``, ``refused``) and is never sent again; its
inferences keep counting against the device's quota in full. The journal keeps a copy,
so deleting the file only sends the record again, to be set aside again.
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


def counts_of(record: Record) -> tuple[int, int, int, int]:
    return (record["inferences"], record["frames"], record["stream_seconds"], record["events"])


CONFLICT = "conflict"  # the service holds other counts for the period
REFUSED = "refused"  # the service refused the period for good (before the licence's life)

Conflict = dict[str, Any]


def conflict(record: Record, license_id: str, held: Any, why: str) -> Conflict:
    """A set-aside entry: ``record`` as sent for ``license_id``; ``held``, the counts the
    receipt held for its period (None when refused)."""
    entry: Conflict = {"record": dict(record), "lic": license_id, "why": why}
    entry["held"] = dict(zip(COUNTER_FIELDS, held, strict=True)) if held is not None else None
    return entry


def is_conflict(entry: Any) -> bool:
    held = entry.get("held", 0) if isinstance(entry, dict) else 0
    return (
        isinstance(entry, dict)
        and is_record(entry.get("record"))
        and isinstance(entry.get("lic"), str)
        and entry.get("why") in (CONFLICT, REFUSED)
        and (
            held is None
            or isinstance(held, dict)
            and set(held) == set(COUNTER_FIELDS)
            and all(type(v) is int and 0 <= v <= MAX_COUNTER for v in held.values())
        )
    )


def _conflict_mark(entry: Any) -> Any:
    if not is_conflict(entry):
        return None
    return (entry["lic"], period_key(entry["record"]), counts_of(entry["record"]))


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

    def _aside_file(self) -> dict[str, list[Any]]:
        try:
            data = read_json(self.aside_path, None)
        except LicenseError:
            data = None
        data = data if isinstance(data, dict) else {}
        return {
            name: data[name] if isinstance(data.get(name), list) else []
            for name in ("records", "conflicts")
        }

    @property
    def aside(self) -> list[Any]:
        """Records moved aside as the service would refuse them (newest last)."""
        return self._aside_file()["records"]

    @property
    def conflicts(self) -> list[Conflict]:
        """Delivered records the service holds with other counts, or refused for good
        (newest last); entries the file holds in another shape are skipped."""
        return [entry for entry in self._aside_file()["conflicts"] if is_conflict(entry)]

    def set_aside(self, refused: list[Any], *, save: bool = False) -> None:
        """Move ``refused`` to the set-aside file (they are not in ``records``)."""
        aside = self._aside_file()
        aside["records"] += refused
        self._write(self.aside_path, {"format": FORMAT, **aside})
        if save:
            self._save(self.records)

    def set_conflicts_aside(self, entries: list[Conflict]) -> None:
        """Keep ``entries`` (:func:`conflict`) in the set-aside file, then take their
        records out of the spool: a crash in between leaves a record in both (sent once
        more, set aside once more), never in neither."""
        aside = self._aside_file()
        held = {_conflict_mark(entry) for entry in aside["conflicts"] if is_conflict(entry)}
        aside["conflicts"] += [entry for entry in entries if _conflict_mark(entry) not in held]
        self._write(self.aside_path, {"format": FORMAT, **aside})
        self.remove([entry["record"] for entry in entries])

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

    def take(self, key: tuple[int, int]) -> Record | None:
        """Remove and return the spooled record of the period ``key`` (None: none)."""
        for record in self.records:
            if period_key(record) == key:
                self._save([r for r in self.records if period_key(r) != key])
                return record
        return None

    def remove(self, done: list[Record]) -> None:
        keys = {period_key(r) for r in done}
        if keys:
            self._save([r for r in self.records if period_key(r) not in keys])

    def _save(self, records: list[Record]) -> None:
        self._write(self.path, {"format": FORMAT, "records": records})
        self.records = records
