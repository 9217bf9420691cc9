"""The licence engine: applies a unit token on the device and meters its use.

Decisions that matter for security and billing:

* The clock high-water mark (the latest second the device has seen) is persisted on
  start and at most once per clock second while the engine runs, never per frame. A
  start with the clock behind it is refused (:class:`ClockRollback`).
* Quota is reserved in blocks ahead of use: "reserved up to N" is on disk before any of
  those N inferences is acknowledged, and a restart resumes from N. A crash can cost at
  most one block of quota; it can never hand quota back.
* Usage is accumulated into fixed periods aligned on the clock; a period is spooled only
  once closed, so it is always reported with the same ``(period_start, period_end)``.
  The open period is checkpointed with the high-water mark, so a crash loses at most
  about one clock second of usage counters.
* Expiry stops analytics only: ``require`` and ``count`` refuse, the stream and frame
  calls (the video path) never raise because of the term.
* Local files cannot unlock anything: verdicts come from documents the authority signed,
  verified again from disk at every load. Whether the licence (or the key that signed
  it) is revoked is read from the newest signed licence status held
  (:mod:`devices.status`); a revocation a sync learns stops analytics on the running
  engine at once. A device that is not air-gapped needs a status of its licence and an
  intact state file; when either is missing, damaged or older than one held before,
  analytics refuse with :class:`SyncRequired` until ``sync`` has fetched a status and a
  signed usage receipt. Signed times of the held statuses and receipt are floors of the
  clock high-water mark, so editing it back does not run an expired licence.
* Usage survives any one file: the open period and the unsent periods are also written
  to an append-only journal (:mod:`devices.journal`), and the quota used is never below
  what the newest signed receipt, the spool and the journal prove together.
* Arguments, clock readings and file contents are checked before use: anything wrong is
  a coded :class:`LicenseError` and counts, writes or sends nothing.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import pubkey
from . import status as statuses
from .bounds import LAST_SECOND, MAX_COUNTER
from .documents import LicenseStatus, UsageReceipt, parse_receipt
from .errors import (
    ActivationRequired,
    BadSignature,
    ClockRollback,
    Code,
    Expired,
    InvalidArgument,
    LicenseError,
    NotEntitled,
    QuotaExceeded,
    Revoked,
    StreamLimit,
    SyncRequired,
    WrongDevice,
)
from .hardware import fingerprint
from .journal import COMPACT_BYTES, Journal, merge, receipt_line, usage_line
from .keys import Keyring, split_license_file
from .spool import COUNTER_FIELDS, Record, UsageSpool, is_record, period_key
from .state import (
    JOURNAL_FILE,
    KEYS_FILE,
    SPOOL_FILE,
    STATE_FILE,
    STATUS_FILE,
    TOKEN_FILE,
    DirectoryLock,
    atomic_write_bytes,
    corrupt,
    read_json,
    sweep_temp_files,
    write_json,
)
from .states import (
    ACTIVE,
    EXPIRED,
    GRACE,
    NBF_LEEWAY_SECONDS,
    NOT_YET_VALID,
    grace_end,
    license_state,
)
from .token import decode_unverified, key_fingerprint, verify_token

log = logging.getLogger("devices")

PERIOD_SECONDS = 3600  # usage periods, aligned on multiples of this on the clock
QUOTA_BLOCK = 1000  # inferences reserved on disk ahead of use
CHECKPOINT_SECONDS = 1  # at most one state write per this many clock seconds
CLOCK_LEEWAY_SECONDS = 300  # clock steps back (NTP, RTC drift) tolerated at start
MAX_RECORDS_PER_UPLOAD = 1000  # the service processes at most this many (spec §8)
DEFAULT_TIMEOUT = 10.0
STATE_FORMAT = 1
MAX_LICENSE_FILE_BYTES = 64 << 10  # a token and a few key certificates


class Stream:
    """One open video stream; frames are admitted per second of the engine clock."""

    __slots__ = ("number", "open", "frames_admitted", "frames_dropped", "_second", "_admitted")

    def __init__(self, number: int) -> None:
        self.number = number
        self.open = True
        self.frames_admitted = 0
        self.frames_dropped = 0
        self._second = -1
        self._admitted = 0


def trust_anchors(public_key: Any, root_keys: Any) -> Keyring:
    """The keyring of an engine: the root keyring of the build (or ``root_keys``), or
    in a build without roots the one pinned ``public_key`` / compiled-in key."""
    compiled = getattr(pubkey, "ROOT_KEYS", ())  # a pubkey.py written before root keyrings
    try:
        roots = tuple(root_keys) if root_keys is not None else tuple(compiled)
    except TypeError:
        raise InvalidArgument("root_keys must be a list of public keys") from None
    if roots and public_key is not None:
        raise LicenseError(
            "this build trusts its root keyring; license_pubkey cannot add a key (signing "
            "keys are certified by the root and their certificates arrive with activation "
            "and sync)",
            code=Code.BAD_PUBLIC_KEY,
        )
    pinned = public_key if public_key is not None else pubkey.PUBLIC_KEY
    if not roots and pinned is None:
        raise LicenseError(
            "no licence public key: this build has no root keyring or key compiled in "
            "(python -m devices vendor --root FILE) and no license_pubkey was configured",
            code=Code.NO_PUBLIC_KEY,
        )
    try:
        return Keyring(roots, pinned=None if roots else pinned)
    except ValueError as exc:
        raise LicenseError(
            f"unusable licence public key: {exc}", code=Code.BAD_PUBLIC_KEY
        ) from None


def _renewal_problem(held: dict[str, Any], renewed: dict[str, Any], device_id: str) -> str:
    """What makes ``renewed`` unfit to replace the licence ``held`` ("" when nothing):
    it must be the same licence, customer and SKU, bound to this device, and end no
    earlier (0: perpetual, the latest)."""
    for name in ("lic", "sub", "sku"):
        if renewed.get(name) != held.get(name):
            return f"another licence ({name} {renewed.get(name)!r}, held {held.get(name)!r})"
    if renewed["act"] == "required" or renewed["dev"] != device_id:
        return f"a licence not bound to this device (dev {renewed['dev']!r})"

    def end(claims: dict[str, Any]) -> float:
        return math.inf if not claims["exp"] else claims["exp"]

    if end(renewed) < end(held):
        return f"a licence ending earlier ({renewed['exp']}) than the one held ({held['exp']})"
    return ""


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _revoked_message(held: LicenseStatus) -> str:
    return (
        f"licence {held.license_id} is revoked (revoked at {held.revoked_at}; signed status "
        f"at revocation-list sequence {held.seq})"
    )


def _unwritable(path: Path, exc: OSError) -> LicenseError:
    return LicenseError(
        f"state file {path} cannot be written: {exc.strerror or exc}; nothing was acknowledged",
        code=Code.STATE_UNWRITABLE,
    )


def _not_started() -> LicenseError:
    return LicenseError("engine not started: call start(token) first", code=Code.NOT_STARTED)


class Engine:
    """Licence engine of one device (contract §8). One engine per ``state_dir`` (a lock
    refuses a second one with ``STATE_LOCKED``).

    ``air_gapped=True`` is for devices that never reach the service: no revocation list
    is required (none can arrive), and a missing state file starts from zero. Otherwise
    the engine needs the list and state that ``activate`` and ``sync`` write.
    ``clock_leeway`` is how far the clock may step back behind its high-water mark.

    Trust: a build with a root keyring (``pubkey.ROOT_KEYS``, or ``root_keys=``) accepts
    a token, list page or receipt only when its signing key (``kid``) has a certificate
    from one of those roots valid when it was signed and is not revoked; certificates
    arrive with the activation answer, every sync and inside licence files, and are kept
    in ``state_dir/keys.json``. Such a build refuses ``public_key=`` (the
    ``license_pubkey`` setting): a setting cannot add trust. A build without roots trusts
    the one ``public_key`` (or compiled-in ``pubkey.PUBLIC_KEY``), as before.
    """

    def __init__(
        self,
        state_dir: str | Path,
        *,
        public_key: Any = None,
        device_id: str | None = None,
        clock: Callable[[], float] = time.time,
        air_gapped: bool = False,
        clock_leeway: float = CLOCK_LEEWAY_SECONDS,
        root_keys: Any = None,
    ) -> None:
        if not isinstance(state_dir, (str, os.PathLike)) or not str(state_dir):
            raise InvalidArgument(f"state_dir must be a path, not {type(state_dir).__name__}")
        if device_id is not None and (not isinstance(device_id, str) or not device_id):
            raise InvalidArgument("device_id must be a non-empty string or None")
        if not callable(clock):
            raise InvalidArgument("clock must be a callable returning Unix seconds")
        if not _is_real(clock_leeway) or not 0 <= clock_leeway <= LAST_SECOND:
            raise InvalidArgument(
                f"clock_leeway must be a number of seconds >= 0, not {clock_leeway!r}"
            )
        self._keys = trust_anchors(public_key, root_keys)
        self.state_dir = Path(state_dir)
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LicenseError(
                f"cannot create {self.state_dir}: {exc.strerror or exc}", code=Code.STATE_UNREADABLE
            ) from None
        self._dir_lock = DirectoryLock(self.state_dir)
        try:
            self._open(device_id, clock, air_gapped, clock_leeway)
        except BaseException:
            self._dir_lock.release()
            raise

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
        self._next_event = -math.inf  # the hot paths take the slow path when now >= this

    # -- persistence -----------------------------------------------------------------

    def _write(self, path: Path, value: Any) -> None:
        try:
            write_json(path, value)
        except OSError as exc:
            raise _unwritable(path, exc) from None
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
        delivered: set[tuple[int, int]] = set()
        for receipt in self._receipts.values():
            delivered |= receipt.records
        opened = self._open_record()
        if opened is not None:
            merge(found, opened)
        spooled = self._spool.keys()
        candidates = sorted(k for k in found if k not in spooled and k not in delivered)
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
        """What the journal holds after a rewrite: the receipts held, the unsent periods
        and the open one."""
        lines = [receipt_line(r.text) for r in self._receipts.values()]
        lines += [usage_line(record, self._hwm) for record in self._spool.records]
        record = self._open_record()
        if record is not None and any(self._counters):
            lines.append(usage_line(record, self._hwm))
        return b"".join(lines)

    def _usage_floor(self, license_id: str) -> int:
        """Inferences proven counted for ``license_id``: the newest receipt's total plus
        every period it does not cover (spooled and open). Records set aside count for
        nothing: no engine writes them, and the journal holds the real counts of a
        period whose spooled copy was edited out of bounds."""
        receipt = self._receipts.get(license_id)
        delivered = receipt.records if receipt is not None else frozenset()
        total = receipt.inferences if receipt is not None else 0
        total += sum(r["inferences"] for r in self._spool.records if period_key(r) not in delivered)
        return total + self._counters[0]

    def _open_record(self) -> Record | None:
        if not self._period_end:
            return None
        record = {"period_start": self._period_start, "period_end": self._period_end}
        record.update(zip(COUNTER_FIELDS, self._counters, strict=True))
        return record

    # -- start -----------------------------------------------------------------------

    def start(self, token: str | None = None) -> str:
        """Verify and apply ``token`` (default: ``state_dir/license.token``); return
        ``"active"`` or ``"SVC_LIC_GRACE"``.

        Raises BadSignature (also for a token signed by a key a held status names as
        revoked: code KEY_REVOKED), ActivationRequired (batch key or unbound token),
        WrongDevice, ClockRollback (clock more than ``clock_leeway`` behind the
        high-water mark), Revoked (the held signed status says so), Expired (past term
        and grace, or before ``nbf``), SyncRequired (no signed status of this licence,
        one older than held before, or the state missing or damaged), InvalidArgument
        (``token`` not a string), LicenseError CLOCK_INVALID. After Expired or
        SyncRequired the limits still apply to the video path (``open_stream``,
        ``admit_frame``); analytics refuse.
        """
        if token is None:
            token = self._read_token_file()
        elif not isinstance(token, str):
            raise InvalidArgument(f"token must be a string or None, not {type(token).__name__}")
        token, certificates = split_license_file(token)
        with self._lock:
            self._learn_certificates(certificates, strict=True)
        claims = verify_token(token, self._keys)
        lic = claims["lic"]
        if claims["act"] == "required" or claims["dev"] == "*":
            raise ActivationRequired(
                f"licence {lic} is a batch key; exchange it with activate() for a unit token"
            )
        if claims["dev"] != self.device_id:
            raise WrongDevice(
                f"licence {lic} is bound to device {claims['dev']!r}, this is {self.device_id!r}"
            )
        with self._lock:
            now = self._now()
            held = self._statuses.get(lic)
            if held is not None and held.revoked:  # whatever the clock says
                raise Revoked(_revoked_message(held))
            if now < self._hwm - self._leeway:
                raise ClockRollback(
                    f"clock reads {math.floor(now)}, more than {int(self._leeway)} s before "
                    f"{self._hwm}, the latest time this device has recorded or been signed; "
                    "correct the clock (a sync corrects a high-water mark a bad clock pushed "
                    "ahead) and restart"
                )
            state = license_state(claims, now, nbf_leeway=NBF_LEEWAY_SECONDS)
            if state == NOT_YET_VALID:
                raise Expired(f"licence {lic} is not valid before {claims['nbf']}")
            self._install(token, claims, now)
            if self._refusal is not None:
                raise self._refused()
            if self._expired:
                raise Expired(self._expired_message())
            if self._blocked is not None:
                raise SyncRequired(self._blocked)
            return self._state or ACTIVE

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

    def _now(self) -> float:
        """The clock, checked: a reading outside 0..LAST_SECOND (or not a number) is
        refused before it can move the high-water mark or a period."""
        now = self._clock()
        try:
            if 0 <= now <= LAST_SECOND:
                return now
        except TypeError:
            pass
        raise LicenseError(
            f"the clock read {now!r}, not a Unix time in 0..{LAST_SECOND}; nothing was "
            "counted or written",
            code=Code.CLOCK_INVALID,
        )

    def _install(self, token: str, claims: dict[str, Any], now: float) -> None:
        lim = claims["lim"]
        if claims["lic"] != self._lic:
            # Resume from the reservation on disk (the unused rest of a block is lost),
            # never below what the signed receipt, the spool and the journal prove.
            lic = claims["lic"]
            used = max(self._quota_reserved.get(lic, 0), self._usage_floor(lic))
            self._used = self._reserved = used
        self._token, self._claims, self._lic = token, claims, claims["lic"]
        self._update_blocked()
        self._judge()
        self._max_streams, self._max_fps = lim["max_streams"], lim["max_fps"]
        self._quota_cap = lim["api_calls"] or math.inf
        self._exp = claims["exp"]
        self._stop_at = grace_end(claims)
        self._state, self._expired = ACTIVE, False
        self._next_checkpoint = math.floor(now) + CHECKPOINT_SECONDS
        self._update_term(now)
        # A period in the future of the clock was not opened by this engine: close it.
        if now >= self._period_end or now < self._period_start - self._leeway:
            self._roll_period(now)
        else:
            self._persist(now)
        self._schedule(now)

    def _judge(self) -> None:
        """Whether signed evidence refuses analytics to the licence held: its newest
        status says revoked, or the held token no longer verifies (its signing key is
        revoked). Taken at start and after every sync."""
        self._refusal = None
        if self._lic is None or self._token is None:
            return
        held = self._statuses.get(self._lic)
        if held is not None and held.revoked:
            self._refusal = (Revoked, _revoked_message(held), Revoked.code)
            return
        try:
            verify_token(self._token, self._keys)
        except BadSignature as exc:
            self._refusal = (type(exc), f"licence {self._lic}: {exc}", exc.code)

    def _refused(self) -> LicenseError:
        assert self._refusal is not None
        kind, message, code = self._refusal
        return kind(message, code=code)

    def _update_blocked(self) -> None:
        """Why analytics wait for a sync (None: they do not)."""
        reasons = list(self._problems)
        if self._restore_pending and not reasons:
            reasons.append("usage total not restored since the state file was lost")
        if not self.air_gapped and self._lic is not None:
            if self._lic not in self._statuses:
                why = f" ({self._status_why})" if self._status_why else ""
                reasons.append(f"no signed status of licence {self._lic} on this device{why}")
            else:
                stale = statuses.floors_problem(self._statuses, self._status_floors, self._lic)
                if stale:
                    reasons.append(stale)
        self._blocked = (
            "analytics wait for a successful sync(): " + "; ".join(reasons) if reasons else None
        )

    # -- the slow path: term, period roll-over, checkpoint ---------------------------

    def _update_term(self, now: float) -> None:
        """Move on to grace or expiry as the clock passes them. Only ever forward: a
        clock stepping back while running changes nothing, and ``nbf`` was checked at
        start."""
        assert self._claims is not None
        state = license_state(self._claims, now, nbf_leeway=NBF_LEEWAY_SECONDS)
        if state == EXPIRED:
            if not self._expired:
                self._state, self._expired = EXPIRED, True
                log.warning("%s; analytics stopped, video continues", self._expired_message())
        elif state == GRACE and self._state == ACTIVE:
            self._state = GRACE
            log.warning(
                "licence %s expired at %d; grace period (%s) until %d",
                self._lic,
                self._exp,
                GRACE,
                self._stop_at,
            )

    def _expired_message(self) -> str:
        return f"licence {self._lic} expired at {self._exp}, grace ended at {self._stop_at}"

    def _roll_period(self, now: float) -> None:
        """Spool the open period (if it has usage) and open the one containing ``now``.
        The journal and the spool are written before the state, so a crash in between
        leaves the period in every file, and loading prefers the spooled copy."""
        record = self._open_record()
        if record is not None and any(self._counters):
            if (record["period_start"], *self._counters) != self._journaled:
                self._journal_append(usage_line(record, self._hwm))
            self._spool.add(record)
        start = math.floor(now) // PERIOD_SECONDS * PERIOD_SECONDS
        self._period_start = start
        self._period_end = min(start + PERIOD_SECONDS, LAST_SECOND)
        self._counters = [0, 0, 0, 0]
        self._journaled = ()
        self._persist(now)

    def _advance(self, now: float) -> None:
        """Taken when the clock passes the next event: at most about once per clock
        second, and at period and term boundaries."""
        if self._claims is None:
            raise _not_started()
        self._next_checkpoint = math.floor(now) + CHECKPOINT_SECONDS
        self._update_term(now)
        try:
            if now >= self._period_end:
                self._roll_period(now)
            else:
                self._persist(now)
        finally:
            self._schedule(now)

    def _schedule(self, now: float) -> None:
        if self._expired:
            term = math.inf
        elif self._state == GRACE or not self._exp:
            term = math.nextafter(self._stop_at, math.inf)
        else:
            term = math.nextafter(self._exp, math.inf)
        # A failed roll-over leaves period_end behind; retry it with the next checkpoint.
        events = [t for t in (self._period_end, self._next_checkpoint, term) if t > now]
        self._next_event = min(events, default=self._next_checkpoint)

    def _advance_for_video(self, now: float) -> None:
        """The video path checkpoints too, but a failing disk must not stop it."""
        with self._lock:
            if now < self._next_event:
                return
            try:
                self._advance(now)
            except (OSError, LicenseError) as exc:
                log.warning("engine checkpoint failed: %s", exc)

    # -- analytics -------------------------------------------------------------------

    def require(self, module: str) -> None:
        """Raise NotEntitled unless the licence switches ``module`` on; Revoked once a
        signed status says so (or BadSignature KEY_REVOKED for a revoked signing key),
        Expired after term and grace, SyncRequired while evidence is missing."""
        if not isinstance(module, str):
            raise InvalidArgument(f"module must be a string, not {type(module).__name__}")
        with self._lock:
            now = self._now()
            if now >= self._next_event:
                self._advance(now)
            if self._refusal is not None:
                raise self._refused()
            if self._expired:
                raise Expired(self._expired_message())
            if self._blocked is not None:
                raise SyncRequired(self._blocked)
            assert self._claims is not None
            if self._claims["ent"].get(module) is not True:
                raise NotEntitled(f"licence {self._lic} does not include module {module!r}")

    def count(
        self, inferences: int = 0, frames: int = 0, stream_seconds: int = 0, events: int = 0
    ) -> None:
        """Meter usage. Nothing is counted when it raises: QuotaExceeded when
        ``inferences`` would pass ``lim.api_calls``; InvalidArgument for a count that is
        not a whole number >= 0; LicenseError USAGE_OUT_OF_RANGE when a counter of the
        open period would pass what the service accepts for one record
        (:data:`devices.bounds.MAX_COUNTER`); Revoked, Expired, SyncRequired as
        :meth:`require`."""
        for value in (inferences, frames, stream_seconds, events):
            if type(value) is not int or value < 0:
                raise InvalidArgument(f"usage counts must be whole numbers >= 0, not {value!r}")
        with self._lock:
            now = self._now()
            if now >= self._next_event:
                self._advance(now)
            if self._refusal is not None:
                raise self._refused()
            if self._expired:
                raise Expired(self._expired_message())
            if self._blocked is not None:
                raise SyncRequired(self._blocked)
            used = self._used + inferences
            if used > self._quota_cap:
                raise QuotaExceeded(
                    f"licence {self._lic}: {self._used} of {self._quota_cap} inferences "
                    f"used, {inferences} more refused"
                )
            counters = self._counters
            if (
                counters[0] + inferences > MAX_COUNTER
                or counters[1] + frames > MAX_COUNTER
                or counters[2] + stream_seconds > MAX_COUNTER
                or counters[3] + events > MAX_COUNTER
            ):
                raise LicenseError(
                    f"usage of the period from {self._period_start} would pass {MAX_COUNTER} "
                    "per counter, the most the service accepts in one record; nothing counted",
                    code=Code.USAGE_OUT_OF_RANGE,
                )
            counters[0] += inferences
            counters[1] += frames
            counters[2] += stream_seconds
            counters[3] += events
            self._used = used
            if used > self._reserved:
                self._reserve(inferences, frames, stream_seconds, events)

    def _reserve(self, *counts: int) -> None:
        """Persist a new block of quota before the call that needs it returns; if the
        write fails, the call is undone and the error raised (nothing acknowledged)."""
        previous, self._reserved = (
            self._reserved,
            int(min(self._used + QUOTA_BLOCK, self._quota_cap)),
        )
        try:
            self._persist(None)
        except BaseException:
            self._reserved = previous
            self._used -= counts[0]
            for index, value in enumerate(counts):
                self._counters[index] -= value
            raise

    # -- video path ------------------------------------------------------------------

    @contextmanager
    def open_stream(self) -> Iterator[Stream]:
        """``with engine.open_stream() as stream:``; StreamLimit past ``lim.max_streams``."""
        with self._lock:
            if self._claims is None:
                raise _not_started()
            if self._streams_open >= self._max_streams:
                raise StreamLimit(
                    f"licence {self._lic} allows {self._max_streams} concurrent streams, "
                    f"{self._streams_open} open"
                )
            self._streams_open += 1
            self._streams_total += 1
            stream = Stream(self._streams_total)
        try:
            yield stream
        finally:
            with self._lock:
                stream.open = False
                self._streams_open -= 1

    def admit_frame(self, stream: Stream) -> bool:
        """True when ``stream`` may take another frame this clock second
        (``lim.max_fps``); never raises because of the licence term or a revocation
        (InvalidArgument for something that is not a stream of this module, LicenseError
        CLOCK_INVALID for a clock reading outside 0..LAST_SECOND)."""
        if type(stream) is not Stream:
            raise InvalidArgument(f"admit_frame takes a Stream, not {type(stream).__name__}")
        now = self._now()
        if now >= self._next_event:
            self._advance_for_video(now)
        second = int(now)
        if second != stream._second:
            stream._second = second
            stream._admitted = 0
        if stream._admitted >= self._max_fps or not stream.open:
            stream.frames_dropped += 1
            return False
        stream._admitted += 1
        stream.frames_admitted += 1
        return True

    # -- network ---------------------------------------------------------------------

    def sync(
        self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT, allow_http: bool = False
    ) -> dict[str, Any]:
        """Upload up to 1000 spooled records, fetch the signed status of the licence held,
        then fetch the licence again when the service has a newer token for it (a
        renewal).

        The three are independent: each is attempted even when another fails, usage
        first. A spooled record is deleted only when a usage receipt signed by the
        authority, bound to this upload's nonce, covers it; a forged or missing receipt
        costs nothing. A status is accepted only when it verifies, names this licence
        and device and is not older than the one held (:mod:`devices.status`); it
        takes effect at once on the running engine. A renewed licence is installed only
        when it verifies like any token and is the same licence for this device, ending
        no earlier; it replaces ``license.token`` atomically and takes effect at once
        (``summary["license"]``: ``"renewed"``, ``"current"``, or ``"kept"`` when
        anything was wrong: the licence held stays).

        When the verified status says the licence held is revoked, raises
        :class:`Revoked` (always, whatever else failed; ``summary["revoked"]`` is True);
        when the held licence's signing key is revoked, BadSignature ``KEY_REVOKED``.
        Otherwise raises the first failure after all were tried: LicenseError
        (``NETWORK_ERROR``, ``SYNC_FAILED``, ``UPLOAD_REFUSED``, ``RECEIPT_INVALID``,
        ``LIST_*``, ``REFRESH_*``, ``INSECURE_URL`` for ``http://`` unless
        ``allow_http``), BadSignature (401 on upload). Every exception carries the
        summary on ``exc.summary``.
        """
        if not isinstance(base_url, str):
            raise InvalidArgument(f"base_url must be a string, not {type(base_url).__name__}")
        if not _is_real(timeout) or timeout <= 0:
            raise InvalidArgument(f"timeout must be a number of seconds > 0, not {timeout!r}")
        from . import client  # the networking modules load on first use only

        base = client.endpoint(base_url, "", allow_http=allow_http)
        with self._lock:
            now = self._now()
            if self._claims is not None and now >= self._period_end:
                self._advance(now)
            token = self._token
            if token is None:  # not started: the licence file, token and certificates
                token, certificates = split_license_file(self._read_token_file())
                self._learn_certificates(certificates)
        license_id = decode_unverified(token)["lic"]
        summary: dict[str, Any] = {"accepted": 0, "duplicates": 0, "deferred": 0}
        errors: list[LicenseError] = []
        try:
            self._upload(client, base, token, license_id, summary, timeout)
        except LicenseError as exc:
            errors.append(exc)
        try:
            self._refresh_status(client, base, license_id, timeout)
        except LicenseError as exc:
            errors.append(exc)
        summary["license"] = "kept"
        held = self._statuses.get(license_id)
        # A revoked licence has nothing to fetch: the signed status has the last word.
        if held is None or not held.revoked:
            try:
                summary["license"] = self._refresh_license(client, base, token, timeout)
            except LicenseError as exc:
                errors.append(exc)
        with self._lock:
            if not errors:
                self._problems = []
            self._update_blocked()
            self._judge()
            refusal = self._refused() if self._refusal is not None else None
        summary["pending"] = len(self._spool)
        summary["set_aside"] = len(self._spool.aside)
        summary["revoked"] = held is not None and held.revoked
        summary["list_seq"] = held.seq if held is not None else None
        summary["errors"] = [exc.code for exc in errors]
        if summary["revoked"] and held is not None:
            refusal = Revoked(_revoked_message(held))
        raised = refusal or (errors[0] if errors else None)
        if raised is not None:
            raised.summary = summary  # type: ignore[attr-defined]
            raise raised
        return summary

    def _upload(
        self,
        client: Any,
        base: str,
        token: str,
        license_id: str,
        summary: dict[str, Any],
        timeout: float,
    ) -> None:
        import secrets

        with self._lock:
            batch = self._spool.batch(MAX_RECORDS_PER_UPLOAD)
            # An empty upload still earns a receipt: the signed time and usage total a
            # lost state or a clock pushed ahead needs.
            wanted = self._restore_pending or self._hwm > self._now() + self._leeway
        if not batch and not wanted:
            return
        nonce = secrets.token_urlsafe(16)
        status, payload = client.upload_usage(
            base,
            unit_token=token,
            device_id=self.device_id,
            license_id=license_id,
            records=batch,
            nonce=nonce,
            timeout=timeout,
            allow_http=True,  # `base` was checked against the caller's choice
        )
        if status == 403:  # not evidence: only a signed status revokes
            raise LicenseError(
                f"usage upload refused: {client.detail(status, payload)}; {len(batch)} records "
                "kept",
                code=Code.UPLOAD_REFUSED,
            )
        if status == 401:
            raise BadSignature(f"usage upload refused: {client.detail(status, payload)}")
        if status != 200:
            raise LicenseError(
                f"usage upload failed: {client.detail(status, payload)}", code=Code.SYNC_FAILED
            )
        try:
            with self._lock:
                self._learn_certificates(payload.get("certificates"))
            receipt = parse_receipt(payload.get("receipt"), self._keys)
        except LicenseError as exc:
            raise LicenseError(
                f"usage upload answered without a valid receipt ({exc}); "
                f"{len(batch)} records kept for the next sync",
                code=Code.RECEIPT_INVALID,
            ) from None
        if (receipt.nonce, receipt.device_id, receipt.license_id) != (
            nonce,
            self.device_id,
            license_id,
        ):
            raise LicenseError(
                "usage receipt is for another upload, device or licence; "
                f"{len(batch)} records kept for the next sync",
                code=Code.RECEIPT_INVALID,
            )
        covered = [record for record in batch if period_key(record) in receipt.records]
        with self._lock:
            # The receipt first, then the spool: a crash in between counts the covered
            # records twice (they are sent again as duplicates), never zero times.
            self._apply_receipt(receipt)
            self._spool.remove(covered)
            self._compact_journal()
        for name in ("accepted", "duplicates"):
            value = payload.get(name)
            summary[name] = value if type(value) is int else 0
        summary["deferred"] = len(batch) - len(covered)

    def _apply_receipt(self, receipt: UsageReceipt) -> None:
        """Take the authority's signed time and usage total (the lock is held)."""
        signed = receipt.issued_at
        if self._hwm > signed + self._leeway:
            log.warning(
                "clock high-water mark %d was ahead of the authority's signed time %d "
                "(a bad clock date); corrected",
                self._hwm,
                signed,
            )
            self._hwm = signed
        self._hwm = max(self._hwm, signed)
        self._receipts[receipt.license_id] = receipt
        floor = self._usage_floor(receipt.license_id)
        if receipt.license_id == self._lic:
            self._used = max(self._used, floor)
            self._reserved = max(self._reserved, self._used)
        else:
            used = self._quota_reserved.get(receipt.license_id, 0)
            self._quota_reserved[receipt.license_id] = max(used, floor)
        self._restore_pending = False
        self._receipt = receipt.text
        self._persist(None)

    def _compact_journal(self) -> None:
        """Rewrite the journal as the receipts held and the unsent usage (the lock is
        held); the journal is the second copy, so a failure is logged."""
        try:
            self._journal.rewrite(self._journal_image())
            self.journal_writes += 1
        except OSError as exc:
            log.warning("usage journal %s not rewritten: %s", self._journal.path, exc)

    def _refresh_status(self, client: Any, base: str, license_id: str, timeout: float) -> None:
        """Fetch and keep the signed status of the licence in the token file and of the
        licence running, when they differ (``GET /v1/revocations/status``)."""
        wanted = [license_id] if self._lic in (None, license_id) else [license_id, self._lic]
        for lic in wanted:
            code, payload = client.fetch_status(
                base, license_id=lic, device_id=self.device_id, timeout=timeout, allow_http=True
            )
            if code != 200:
                raise LicenseError(
                    f"licence status of {lic} unavailable: {client.detail(code, payload)}; the "
                    "status held is kept",
                    code=Code.SYNC_FAILED,
                )
            with self._lock:
                self._learn_certificates(payload.get("certificates"))
                held = self._statuses.get(lic)
                status = statuses.accept(
                    payload.get("status"),
                    self._keys,
                    license_id=lic,
                    device_id=self.device_id,
                    held=held,
                    now=self._now(),
                    leeway=self._leeway,
                )
                if held is not None and status.text == held.text:
                    continue
                kept = statuses.keep(self._statuses, status)
                self._write(self.state_dir / STATUS_FILE, statuses.to_json(kept))
                self._statuses, self._status_why = kept, ""
                self._keys.revoked = self._keys.revoked | status.revoked_keys
                self._raise_mark(status.issued_at)
                self._persist(None)  # the newest status's floor goes to state.json
                if status.revoked:
                    log.warning("%s; analytics stopped, video continues", _revoked_message(status))

    def _refresh_license(self, client: Any, base: str, token: str, timeout: float) -> str:
        """Fetch the held licence again (``GET /v1/license``); install a renewed one.
        ``"current"`` (304), ``"renewed"``, or raises with the licence held kept."""
        status, payload = client.fetch_license(
            base, token=token, device_id=self.device_id, timeout=timeout, allow_http=True
        )
        if status == 304:
            return "current"
        if status != 200:
            raise LicenseError(
                f"licence refresh failed: {client.detail(status, payload)}; the licence held "
                "is kept",
                code=Code.REFRESH_FAILED,
            )
        with self._lock:
            self._learn_certificates(payload.get("certificates"))
        renewed = payload.get("token")
        held = decode_unverified(token)
        try:
            if not isinstance(renewed, str):
                raise LicenseError("the answer carries no token", code=Code.REFRESH_INVALID)
            claims = verify_token(renewed, self._keys)
        except LicenseError as exc:
            raise LicenseError(
                f"licence refresh answered a token that does not verify ({exc}); the "
                "licence held is kept",
                code=Code.REFRESH_INVALID,
            ) from None
        problem = _renewal_problem(held, claims, self.device_id)
        if problem:
            raise LicenseError(
                f"licence refresh answered {problem}; the licence held is kept",
                code=Code.REFRESH_INVALID,
            )
        with self._lock:
            # The file first: a crash leaves the old licence or the new one, never none.
            try:
                atomic_write_bytes(self.state_dir / TOKEN_FILE, renewed.encode("ascii") + b"\n")
            except OSError as exc:
                raise _unwritable(self.state_dir / TOKEN_FILE, exc) from None
            if self._lic == claims["lic"]:
                self._install(renewed, claims, self._now())
            log.info("licence %s renewed: ends at %d", claims["lic"], claims["exp"])
        return "renewed"

    def revoked_licenses(self) -> frozenset[str]:
        """Licence ids this device holds whose verified status says revoked."""
        return frozenset(lic for lic, status in self._statuses.items() if status.revoked)

    @property
    def set_aside_records(self) -> list[Any]:
        """Spooled records moved aside because the service would refuse them (kept in
        ``spool.rejected.json``, never sent)."""
        return self._spool.aside

    # -- lifecycle and introspection -------------------------------------------------

    def close(self) -> None:
        """Persist exact counters and give back the unused quota reservation (a clean
        shutdown loses nothing; a crash loses at most one block)."""
        try:
            with self._lock:
                if self._claims is not None:
                    self._reserved = self._used
                    try:
                        now: float | None = self._now()
                    except LicenseError:
                        now = None
                    self._persist(now)
        finally:
            self._dir_lock.release()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def state(self) -> str | None:
        """``"active"``, ``"SVC_LIC_GRACE"``, ``"LICENSE_EXPIRED"``, or None before start."""
        return self._state

    @property
    def claims(self) -> dict[str, Any] | None:
        return self._claims

    @property
    def license_id(self) -> str | None:
        return self._lic

    @property
    def quota_used(self) -> int:
        return self._used

    @property
    def quota_remaining(self) -> int | None:
        """Inferences left, or None when unmetered."""
        if self._quota_cap == math.inf:
            return None
        return int(self._quota_cap) - self._used

    @property
    def usage(self) -> Record | None:
        """The open (not yet spooled) period."""
        return self._open_record()

    @property
    def pending_records(self) -> list[Record]:
        return self._spool.batch(len(self._spool))

    @property
    def key_fingerprint(self) -> str:
        """Fingerprint of the pinned key, or of the root keys (comma-separated)."""
        keys = [self._keys.pinned] if self._keys.pinned is not None else self._keys.roots.values()
        return ",".join(key_fingerprint(key) for key in keys)
