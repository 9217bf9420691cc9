"""What the engine keeps on disk: the state directory's files opened, loaded and
verified again at every start, written atomically, and the usage journal.

:class:`StateFiles` is one part of :class:`devices.engine.Engine` (a mixin: the methods
share the engine's state); nothing a camera owner writes here unlocks anything, as the
engine's module says.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import status as statuses
from .bounds import LAST_SECOND
from .documents import LicenseStatus, UsageReceipt, parse_receipt
from .errors import (
    ActivationRequired,
    BadSignature,
    Code,
    LicenseError,
)
from .hardware import fingerprint
from .journal import COMPACT_BYTES, Journal, merge, receipt_line, usage_line
from .keys import split_license_file
from .spool import COUNTER_FIELDS, Record, UsageSpool, counts_of, is_record, period_key
from .state import (
    JOURNAL_FILE,
    KEYS_FILE,
    SPOOL_FILE,
    STATE_FILE,
    STATUS_FILE,
    TOKEN_FILE,
    corrupt,
    read_json,
    sweep_temp_files,
    write_json,
)
from .token import decode_unverified

log = logging.getLogger("devices")  # the engine's logger, as in devices.engine

STATE_FORMAT = 1

MAX_LICENSE_FILE_BYTES = 64 << 10  # a token and a few key certificates


def unwritable(path: Path, exc: OSError) -> LicenseError:
    return LicenseError(
        f"state file {path} cannot be written: {exc.strerror or exc}; nothing was acknowledged",
        code=Code.STATE_UNWRITABLE,
    )


class StateFiles:
    """The state directory of an :class:`Engine`."""

    def _open_record(self) -> Record | None:
        if not self._period_end:
            return None
        record = {"period_start": self._period_start, "period_end": self._period_end}
        record.update(zip(COUNTER_FIELDS, self._counters, strict=True))
        return record

    @property
    def set_aside_records(self) -> list[Any]:
        """Spooled records moved aside because the service would refuse them (kept in
        ``spool.rejected.json``, never sent)."""
        return self._spool.aside

    @property
    def pending_records(self) -> list[Record]:
        """The closed periods not yet receipted by the service, oldest first: what the
        next :meth:`sync` uploads."""
        return self._spool.batch(len(self._spool))

    def _open(
        self, device_id: str | None, clock: Callable[[], float], air_gapped: bool, leeway: float
    ) -> None:
        sweep_temp_files(self.state_dir)
        self.device_id = device_id if device_id is not None else fingerprint().value
        self.air_gapped = air_gapped
        self._leeway = leeway
        self._clock = clock
        self._lock = threading.Lock()
        self.state_writes = 0
        self.journal_writes = 0
        self._problems: list[str] = []  # why analytics wait for a sync, found at load
        self._blocked: str | None = None
        self._refusal: tuple[type[LicenseError], str, str] | None = None
        self._lease_end = 0  # the check-in lease end of the newest status held (0: none)
        try:
            self._spool = UsageSpool(self.state_dir / SPOOL_FILE, self._write)
        except LicenseError as exc:
            # The journal holds the same periods: recovered below.
            log.warning("%s; set aside, spool rebuilt from the journal", exc)
            self._quarantine(self.state_dir / SPOOL_FILE)
            self._spool = UsageSpool(self.state_dir / SPOOL_FILE, self._write)
        self._journal = Journal(self.state_dir / JOURNAL_FILE)
        self._journaled: tuple[int, ...] = ()
        self._load_certificates()  # before anything signed is verified
        self._load_state()
        self._load_statuses()
        self._recover_usage()
        self._token: str | None = None
        self._claims: dict[str, Any] | None = None
        self._lic: str | None = None
        self._state: str | None = None
        self._expired = False
        self._exp = 0
        self._stop_at = math.inf
        self._max_streams = self._max_fps = 0
        self._quota_cap: float = math.inf
        self._used = self._reserved = 0
        self._streams_open = self._streams_total = 0
        self._next_checkpoint = 0.0
        # The hot paths take the slow path when Engine._due(now) says so.
        self._next_event = -math.inf
        self._since = -math.inf

    def _write(self, path: Path, value: Any) -> None:
        try:
            write_json(path, value)
        except OSError as exc:
            raise unwritable(path, exc) from None
        self.state_writes += 1

    def _load_certificates(self) -> None:
        """Key certificates kept from earlier answers; each is verified again here, so an
        edited file can add no trust (a certificate that fails is skipped)."""
        try:
            data = read_json(self.state_dir / KEYS_FILE, {})
        except LicenseError as exc:
            log.warning("%s; key certificates will be fetched again", exc)
            return
        self._keys.add_valid(data.get("certificates") if isinstance(data, dict) else None)

    def _learn_certificates(self, texts: Any, *, strict: bool = False) -> None:
        """Keep the verifiable certificates among ``texts``: an answer's plain field
        (others are skipped: they add no trust) or, ``strict``, the lines of a licence
        file (one that does not verify is refused with its KeyNotTrusted code)."""
        if not texts or not self._keys.roots:
            return
        before = set(self._keys.certificates)
        if strict:
            for text in texts:
                self._keys.add(text)
        else:
            self._keys.add_valid(texts)
        if set(self._keys.certificates) != before:
            certificates = sorted(c.text for c in self._keys.certificates.values())
            self._write(self.state_dir / KEYS_FILE, {"format": 1, "certificates": certificates})

    def _quarantine(self, path: Path) -> None:
        """Keep a damaged file for inspection, out of the engine's way."""
        try:
            path.replace(path.with_name(path.name + ".damaged"))
        except OSError as exc:
            raise LicenseError(
                f"{path} is damaged and cannot be moved aside: {exc.strerror or exc}",
                code=Code.STATE_UNREADABLE,
            ) from None

    def _load_statuses(self) -> None:
        """The signed statuses on disk, verified; a status signed by a key that a held
        status names as revoked is dropped (verified again with those keys refused)."""
        path = self.state_dir / STATUS_FILE
        held, why = statuses.load(path, self._keys, self.device_id)
        revoked = statuses.revoked_keys(held.values())
        if revoked:
            self._keys.revoked = revoked
            held, why = statuses.load(path, self._keys, self.device_id)
        self._statuses: dict[str, LicenseStatus] = held
        self._status_why = why
        for status in held.values():
            self._raise_mark(status.issued_at)

    def _raise_mark(self, signed_at: int) -> None:
        """A signed time is a floor of the clock high-water mark."""
        self._hwm = max(self._hwm, min(signed_at, LAST_SECOND))

    def _take_receipt(self, text: str) -> UsageReceipt | None:
        """Keep a verified receipt if it is the newest of its licence."""
        try:
            receipt = parse_receipt(text, self._keys)
        except LicenseError:
            return None
        held = self._receipts.get(receipt.license_id)
        if held is None or receipt.issued_at >= held.issued_at:
            self._receipts[receipt.license_id] = receipt
        self._raise_mark(receipt.issued_at)
        return receipt

    def _recover_usage(self) -> None:
        """Fold the journal into the spool and the open period: for each period the
        largest counts any file holds; periods a held receipt covers are delivered."""
        found, receipts, hwm = self._journal.load()
        for text in receipts:
            self._take_receipt(text)
        self._hwm = max(self._hwm, hwm)
        # Delivered: a held receipt holds the period with exactly the counts found. Set
        # aside: the set-aside file holds it with counts no smaller (deleting that file
        # sends the record again, to be set aside again).
        receipts = list(self._receipts.values())
        aside: dict[tuple[int, int], tuple[int, ...]] = {}
        # Only entries of the licence this directory holds: the journal names no licence,
        # and an entry of another (copied in, or its licence edited) settles nothing.
        held_license = self._license_on_disk()
        for entry in self._spool.conflicts:
            if entry["lic"] != held_license:
                continue
            record = entry["record"]
            aside[period_key(record)] = max(aside.get(period_key(record), ()), counts_of(record))

        def settled(key: tuple[int, int]) -> bool:
            counts = counts_of(found[key])
            if any(receipt.holds(key, counts) for receipt in receipts):
                return True
            kept = aside.get(key)
            return kept is not None and all(map(int.__ge__, kept, counts))

        opened = self._open_record()
        if opened is not None:
            merge(found, opened)
        spooled = self._spool.keys()
        candidates = sorted(k for k in found if k not in spooled and not settled(k))
        self._spool.merge([found[k] for k in found if k in spooled])
        try:
            horizon = self._now() + self._leeway
        except LicenseError:
            horizon = math.inf
        # The open period is the latest one that has begun by the clock; a period in the
        # clock's future was not opened by this engine: it is closed with the rest.
        begun = [k for k in candidates if k[0] <= horizon]
        if begun:
            latest = found[begun[-1]]
            self._period_start, self._period_end = latest["period_start"], latest["period_end"]
            self._counters = [latest[name] for name in COUNTER_FIELDS]
        elif opened is not None and period_key(opened) in candidates:
            self._period_start = self._period_end = 0  # only future periods: none is open
            self._counters = [0, 0, 0, 0]
        closed = [found[k] for k in candidates if k != (self._period_start, self._period_end)]
        if closed:
            log.warning("%d usage periods found only in the journal; spooled again", len(closed))
            self._spool.merge([r for r in closed if any(r[n] for n in COUNTER_FIELDS)])

    def _load_state(self) -> None:
        path = self.state_dir / STATE_FILE
        self._hwm: int = 0
        self._quota_reserved: dict[str, int] = {}
        self._restore_pending = False
        self._receipt = ""
        self._receipts: dict[str, UsageReceipt] = {}
        self._status_floors: dict[str, tuple[int, int]] = {}
        self._period_start = self._period_end = 0
        self._counters = [0, 0, 0, 0]
        try:
            data = read_json(path, None)
            if data is None:
                if not self.air_gapped:
                    self._problems.append(f"no state file in {self.state_dir}")
                    self._restore_pending = True
                return
            self._read_state(path, data)
        except LicenseError as exc:
            if self.air_gapped:
                raise  # nothing online can restore it: an operator must look
            log.warning("%s; set aside until a sync restores it", exc)
            self._quarantine(path)
            self._problems.append(str(exc))
            self._restore_pending = True
            self._hwm, self._quota_reserved, self._receipts = 0, {}, {}
            self._receipt, self._status_floors = "", {}
            self._period_start = self._period_end = 0
            self._counters = [0, 0, 0, 0]

    def _read_state(self, path: Path, data: Any) -> None:
        if not isinstance(data, dict):
            raise corrupt(path, "not a JSON object")
        hwm, quota, period = data.get("hwm", 0), data.get("quota", {}), data.get("open")
        restore, receipt = data.get("restore", False), data.get("receipt", "")
        floors = data.get("status", {})
        if not (
            type(hwm) is int
            and 0 <= hwm <= LAST_SECOND
            and isinstance(quota, dict)
            and all(type(v) is int and 0 <= v < 1 << 63 for v in quota.values())
            and (period is None or is_record(period))
            and type(restore) is bool
            and isinstance(receipt, str)
            and isinstance(floors, dict)
            and all(
                isinstance(v, list) and len(v) == 2 and all(type(n) is int for n in v)
                for v in floors.values()
            )
        ):
            raise corrupt(path, "unexpected content")
        self._hwm, self._quota_reserved, self._restore_pending = hwm, quota, restore
        self._status_floors = {lic: (v[0], v[1]) for lic, v in floors.items()}
        if restore:
            self._problems.append("usage total not restored since the state file was lost")
        if receipt:
            if self._take_receipt(receipt) is None:
                raise corrupt(path, "its usage receipt does not verify")
            self._receipt = receipt
        # A period found in both files was closed just before a crash: the spool has it.
        if period is not None and period_key(period) not in self._spool.keys():
            self._period_start, self._period_end = period["period_start"], period["period_end"]
            self._counters = [int(period[name]) for name in COUNTER_FIELDS]

    def _persist(self, now: float | None) -> None:
        """Write the state file; ``now`` advances the clock high-water mark."""
        hwm = self._hwm if now is None else max(self._hwm, math.floor(now))
        quota = dict(self._quota_reserved)
        if self._lic is not None:
            quota[self._lic] = self._reserved
        state: dict[str, Any] = {
            "format": STATE_FORMAT,
            "hwm": hwm,
            "quota": quota,
            "open": self._open_record(),
        }
        if self._restore_pending:
            state["restore"] = True
        if self._receipt:
            state["receipt"] = self._receipt
        floors = dict(self._status_floors)
        for lic, status in self._statuses.items():
            # The position of the status accepted last; a held one older than it (a
            # replaced status.json) leaves it, so the replacement stays noticed.
            if not statuses.floors_problem(self._statuses, floors, lic):
                floors[lic] = (status.seq, status.issued_at)
        if floors:
            state["status"] = {lic: list(floor) for lic, floor in sorted(floors.items())}
        self._write(self.state_dir / STATE_FILE, state)
        self._hwm, self._quota_reserved, self._status_floors = hwm, quota, floors
        self._journal_open(hwm)

    def _journal_open(self, hwm: int) -> None:
        """Append the open period to the journal when its counts changed since the last
        line. The journal is the second copy: a failure is logged, not raised (the state
        file just written holds the same counts)."""
        record = self._open_record()
        if record is None or not any(self._counters):
            return
        mark = (self._period_start, *self._counters)
        if mark == self._journaled:
            return
        self._journal_append(usage_line(record, hwm))
        self._journaled = mark

    def _journal_append(self, data: bytes) -> None:
        try:
            if self._journal.size + len(data) > COMPACT_BYTES:
                self._journal.rewrite(self._journal_image() + data)
            else:
                self._journal.append(data)
            self.journal_writes += 1
        except OSError as exc:
            log.warning("usage journal %s not written: %s", self._journal.path, exc)

    def _journal_image(self) -> bytes:
        """What the journal holds after a rewrite: the receipts held, the unsent periods,
        the periods set aside and the open one."""
        lines = [receipt_line(r.text) for r in self._receipts.values()]
        lines += [usage_line(record, self._hwm) for record in self._spool.records]
        lines += [usage_line(entry["record"], self._hwm) for entry in self._spool.conflicts]
        record = self._open_record()
        if record is not None and any(self._counters):
            lines.append(usage_line(record, self._hwm))
        return b"".join(lines)

    def _usage_floor(self, license_id: str) -> int:
        """Inferences proven counted for ``license_id``: the newest receipt's total, plus
        every spooled period it does not hold with the counts spooled, plus the open
        period, plus every record set aside as a conflict or refusal of this licence in
        full (the service's total never stands in for what the device counted: a
        proxy that zeroed an upload, or records registered ahead by the owner, leave
        the service's total low and the device's quota where it was). Malformed
        records set aside count for nothing: no engine writes them, and the journal
        holds the real counts of a period whose spooled copy was edited out of bounds."""
        receipt = self._receipts.get(license_id)
        total = receipt.inferences if receipt is not None else 0
        total += sum(
            r["inferences"]
            for r in self._spool.records
            if receipt is None or not receipt.holds(period_key(r), counts_of(r))
        )
        total += sum(
            entry["record"]["inferences"]
            for entry in self._spool.conflicts
            if entry["lic"] == license_id
        )
        return total + self._counters[0]

    def _compact_journal(self) -> None:
        """Rewrite the journal as the receipts held and the unsent usage (the lock is
        held); the journal is the second copy, so a failure is logged."""
        try:
            self._journal.rewrite(self._journal_image())
            self.journal_writes += 1
        except OSError as exc:
            log.warning("usage journal %s not rewritten: %s", self._journal.path, exc)

    def _license_on_disk(self) -> str | None:
        """The licence id ``license.token`` names (unverified: it only narrows what the
        set-aside file may settle), or None when there is none to read."""
        try:
            token, _ = split_license_file(self._read_token_file())
            return decode_unverified(token)["lic"]
        except (LicenseError, ValueError):
            return None

    def _read_token_file(self) -> str:
        path = self.state_dir / TOKEN_FILE
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_LICENSE_FILE_BYTES + 1)
        except FileNotFoundError:
            raise ActivationRequired(
                f"no unit token in {self.state_dir}; activate this device first"
            ) from None
        except OSError as exc:
            raise LicenseError(
                f"{path} cannot be read: {exc.strerror or exc}", code=Code.STATE_UNREADABLE
            ) from None
        try:
            if len(data) > MAX_LICENSE_FILE_BYTES:
                raise ValueError(f"over {MAX_LICENSE_FILE_BYTES} bytes")
            return data.decode("ascii")
        except ValueError as exc:
            raise BadSignature(f"{path} does not hold a licence ({exc})") from None
