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
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import client, pubkey
from .errors import (
    ActivationRequired,
    BadSignature,
    ClockRollback,
    Expired,
    LicenseError,
    NotEntitled,
    QuotaExceeded,
    Revoked,
    StreamLimit,
    WrongDevice,
)
from .hardware import fingerprint
from .spool import COUNTER_FIELDS, Record, UsageSpool, is_record, period_key
from .state import corrupt, read_json, sweep_temp_files, write_json
from .token import decode_unverified, key_fingerprint, load_public_key, verify_token

log = logging.getLogger("devices")

ACTIVE = "active"
GRACE = "SVC_LIC_GRACE"
EXPIRED = "LICENSE_EXPIRED"

PERIOD_SECONDS = 3600  # usage periods, aligned on multiples of this on the clock
QUOTA_BLOCK = 1000  # inferences reserved on disk ahead of use
CHECKPOINT_SECONDS = 1  # at most one state write per this many clock seconds
NBF_LEEWAY_SECONDS = 300  # device clocks run a little behind the service's
MAX_RECORDS_PER_UPLOAD = 1000  # the service processes at most this many (spec §8)

STATE_FILE = "state.json"
SPOOL_FILE = "spool.json"
CRL_FILE = "crl.json"
TOKEN_FILE = client.TOKEN_FILE
STATE_FORMAT = 1


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


def _not_started() -> LicenseError:
    return LicenseError("engine not started: call start(token) first", code="NOT_STARTED")


class Engine:
    """Licence engine of one device (contract §8). One engine per ``state_dir``."""

    def __init__(
        self,
        state_dir: str | Path,
        *,
        public_key: Any = None,
        device_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        key = public_key if public_key is not None else pubkey.PUBLIC_KEY
        if key is None:
            raise LicenseError(
                "no licence public key: this build has none compiled in (python -m devices "
                "vendor --pubkey FILE) and no license_pubkey was configured",
                code="NO_PUBLIC_KEY",
            )
        try:
            self._public_key = load_public_key(key)
        except ValueError as exc:
            raise LicenseError(
                f"unusable licence public key: {exc}", code="BAD_PUBLIC_KEY"
            ) from None
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        sweep_temp_files(self.state_dir)
        self.device_id = device_id if device_id is not None else fingerprint().value
        self._clock = clock
        self._lock = threading.Lock()
        self.state_writes = 0
        self._spool = UsageSpool(self.state_dir / SPOOL_FILE, self._write)
        self._load_state()
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
        write_json(path, value)
        self.state_writes += 1

    def _load_state(self) -> None:
        path = self.state_dir / STATE_FILE
        data = read_json(path, {})
        hwm, quota, period = data.get("hwm", 0), data.get("quota", {}), data.get("open")
        if not (
            type(hwm) is int
            and isinstance(quota, dict)
            and all(type(v) is int and v >= 0 for v in quota.values())
            and (period is None or is_record(period))
        ):
            raise corrupt(path, "unexpected content")
        self._hwm: int = hwm
        self._quota_reserved: dict[str, int] = quota
        self._period_start = self._period_end = 0
        self._counters = [0, 0, 0, 0]
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
        self._write(
            self.state_dir / STATE_FILE,
            {"format": STATE_FORMAT, "hwm": hwm, "quota": quota, "open": self._open_record()},
        )
        self._hwm, self._quota_reserved = hwm, quota

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

        Raises BadSignature, ActivationRequired (batch key or unbound token),
        WrongDevice, ClockRollback, Revoked (cached ``crl.json``), Expired (past term and
        grace, or before ``nbf``). After Expired for the term, the limits still apply to
        the video path (``open_stream``, ``admit_frame``); analytics refuse.
        """
        if token is None:
            token = self._read_token_file()
        token = token.strip()
        claims = verify_token(token, self._public_key)
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
            now = self._clock()
            if now < self._hwm:
                raise ClockRollback(
                    f"clock reads {math.floor(now)}, before {self._hwm}, the latest time this "
                    "device has recorded; correct the clock and restart"
                )
            if lic in self.revoked_licences():
                raise Revoked(f"licence {lic} is on the cached revocation list")
            if claims["nbf"] > now + NBF_LEEWAY_SECONDS:
                raise Expired(f"licence {lic} is not valid before {claims['nbf']}")
            self._install(token, claims, now)
            if self._expired:
                raise Expired(self._expired_message())
            return self._state or ACTIVE

    def _read_token_file(self) -> str:
        try:
            return (self.state_dir / TOKEN_FILE).read_text("ascii")
        except FileNotFoundError:
            raise ActivationRequired(
                f"no unit token in {self.state_dir}; activate this device first"
            ) from None

    def _install(self, token: str, claims: dict[str, Any], now: float) -> None:
        lim = claims["lim"]
        if claims["lic"] != self._lic:
            # Resume from the reservation on disk: the unused rest of a block is lost.
            self._used = self._reserved = self._quota_reserved.get(claims["lic"], 0)
        self._token, self._claims, self._lic = token, claims, claims["lic"]
        self._max_streams, self._max_fps = lim["max_streams"], lim["max_fps"]
        self._quota_cap = lim["api_calls"] or math.inf
        self._exp = claims["exp"]
        self._stop_at = self._exp + claims["grace_days"] * 86400 if self._exp else math.inf
        self._state, self._expired = ACTIVE, False
        self._next_checkpoint = math.floor(now) + CHECKPOINT_SECONDS
        self._update_term(now)
        if now >= self._period_end:
            self._roll_period(now)
        else:
            self._persist(now)
        self._schedule(now)

    # -- the slow path: term, period roll-over, checkpoint ---------------------------

    def _update_term(self, now: float) -> None:
        if now > self._stop_at:
            if not self._expired:
                self._state, self._expired = EXPIRED, True
                log.warning("%s; analytics stopped, video continues", self._expired_message())
        elif self._exp and now > self._exp and self._state != GRACE:
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
        The spool is written before the state, so a crash in between leaves the period
        in both files, and loading prefers the spooled copy."""
        record = self._open_record()
        if record is not None and any(self._counters):
            self._spool.add(record)
        start = math.floor(now) // PERIOD_SECONDS * PERIOD_SECONDS
        self._period_start, self._period_end = start, start + PERIOD_SECONDS
        self._counters = [0, 0, 0, 0]
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
        """Raise NotEntitled unless the licence switches ``module`` on; Expired after
        term and grace."""
        with self._lock:
            now = self._clock()
            if now >= self._next_event:
                self._advance(now)
            if self._expired:
                raise Expired(self._expired_message())
            assert self._claims is not None
            if self._claims["ent"].get(module) is not True:
                raise NotEntitled(f"licence {self._lic} does not include module {module!r}")

    def count(
        self, inferences: int = 0, frames: int = 0, stream_seconds: int = 0, events: int = 0
    ) -> None:
        """Meter usage. Raises QuotaExceeded (nothing counted) when ``inferences`` would
        pass ``lim.api_calls``, Expired after term and grace."""
        if (inferences | frames | stream_seconds | events) < 0:
            raise ValueError("usage counts must be non-negative")
        with self._lock:
            now = self._clock()
            if now >= self._next_event:
                self._advance(now)
            if self._expired:
                raise Expired(self._expired_message())
            used = self._used + inferences
            if used > self._quota_cap:
                raise QuotaExceeded(
                    f"licence {self._lic}: {self._used} of {self._quota_cap} inferences "
                    f"used, {inferences} more refused"
                )
            counters = self._counters
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
        (``lim.max_fps``); never raises because of the licence term."""
        now = self._clock()
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

    def sync(self, base_url: str, *, timeout: float = client.DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Refresh ``crl.json`` and upload up to 1000 spooled records (at-least-once).

        Records are deleted only after a 200; ``deferred`` ones stay for the next call.
        Raises Revoked on 403 (records kept), BadSignature on 401, LicenseError
        (``NETWORK_ERROR``, ``SYNC_FAILED``) otherwise. Returns a summary dict.
        """
        with self._lock:
            now = self._clock()
            if self._claims is not None and now >= self._period_end:
                self._advance(now)
            token = self._token or self._read_token_file().strip()
        license_id = decode_unverified(token)["lic"]
        crl = client.fetch_revocations(base_url, timeout=timeout)
        self._store_revocations(crl)
        summary = {
            "accepted": 0,
            "duplicates": 0,
            "deferred": 0,
            "revoked": license_id in crl["revoked"],
        }
        with self._lock:
            batch = self._spool.batch(MAX_RECORDS_PER_UPLOAD)
        if batch:
            status, payload = client.upload_usage(
                base_url,
                unit_token=token,
                device_id=self.device_id,
                license_id=license_id,
                records=batch,
                timeout=timeout,
            )
            if status == 403:
                raise Revoked(f"usage upload refused: {client.detail(status, payload)}")
            if status == 401:
                raise BadSignature(f"usage upload refused: {client.detail(status, payload)}")
            if status != 200:
                raise LicenseError(
                    f"usage upload failed: {client.detail(status, payload)}", code="SYNC_FAILED"
                )
            deferred = payload.get("deferred", 0)
            deferred = deferred if type(deferred) is int and 0 <= deferred <= len(batch) else 0
            with self._lock:
                self._spool.remove(batch[: len(batch) - deferred])
            for name in ("accepted", "duplicates"):
                value = payload.get(name)
                summary[name] = value if type(value) is int else 0
            summary["deferred"] = deferred
        summary["pending"] = len(self._spool)
        return summary

    def _store_revocations(self, crl: dict[str, Any]) -> None:
        # An older list never replaces a newer one: a replayed answer cannot un-revoke.
        cached = read_json(self.state_dir / CRL_FILE, {})
        as_of = cached.get("as_of", 0) if isinstance(cached, dict) else 0
        if type(as_of) is not int or crl["as_of"] >= as_of:
            self._write(self.state_dir / CRL_FILE, crl)

    def revoked_licences(self) -> frozenset[str]:
        """Licence ids on the cached revocation list (``state_dir/crl.json``)."""
        path = self.state_dir / CRL_FILE
        data = read_json(path, {"revoked": []})
        revoked = data.get("revoked") if isinstance(data, dict) else None
        if not isinstance(revoked, list):
            raise corrupt(path, "no 'revoked' list")
        return frozenset(item for item in revoked if isinstance(item, str))

    # -- lifecycle and introspection -------------------------------------------------

    def close(self) -> None:
        """Persist exact counters and give back the unused quota reservation (a clean
        shutdown loses nothing; a crash loses at most one block)."""
        with self._lock:
            if self._claims is None:
                return
            self._reserved = self._used
            self._persist(self._clock())

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
        return key_fingerprint(self._public_key)
