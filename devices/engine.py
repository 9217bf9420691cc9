"""The licence engine: applies a unit token on the device and meters its use.

:class:`Engine` is in three rooms: this module decides (start, the licence's state,
entitlements, metering, streams), :mod:`devices.persistence` keeps the state directory
(:class:`~devices.persistence.StateFiles`) and :mod:`devices.sync` talks to the service
(:class:`~devices.sync.Syncing`).

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
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import status as statuses
from .bounds import LAST_SECOND, MAX_COUNTER, check_engine_arguments, is_real, path_argument, shown
from .errors import (
    ActivationRequired,
    BadSignature,
    ClockRollback,
    Code,
    Expired,
    InvalidArgument,
    LeaseExpired,
    LicenseError,
    NotEntitled,
    QuotaExceeded,
    Revoked,
    StreamLimit,
    Suspended,
    SyncRequired,
    WrongDevice,
)
from .exchange import Exchanging
from .hardware import MAX_DEVICE_ID
from .identity import components_problem, offline_check, read_components
from .journal import usage_line
from .keys import split_license_file, trust_anchors
from .persistence import StateFiles
from .spool import COUNTER_FIELDS, Record
from .state import (
    DirectoryLock,
)
from .streams import Stream
from .sync import Syncing, revoked_message
from .term import (
    ACTIVE,
    EXPIRED,
    GRACE,
    NBF_LEEWAY_SECONDS,
    NOT_YET_VALID,
    grace_end,
    license_state,
)
from .token import key_fingerprint, verify_token

log = logging.getLogger("devices")

PERIOD_SECONDS = 3600  # usage periods, aligned on multiples of this on the clock
QUOTA_BLOCK = 1000  # inferences reserved on disk ahead of use
CHECKPOINT_SECONDS = 1  # at most one state write per this many clock seconds
CLOCK_LEEWAY_SECONDS = 300  # clock steps back (NTP, RTC drift) tolerated at start


def _not_started() -> LicenseError:
    return LicenseError("engine not started: call start(token) first", code=Code.NOT_STARTED)


class Engine(StateFiles, Syncing, Exchanging):
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

    _stepped_back_at = -math.inf  # time.monotonic() of the last checkpoint a step back took

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
        components: Mapping[str, str] | None = None,
    ) -> None:
        directory = path_argument(state_dir, "state_dir")
        problem = (
            ""
            if components is None
            else components_problem(dict(components))
            if isinstance(components, Mapping)
            else "must be a mapping or None"
        )
        if problem:
            raise InvalidArgument(f"components {problem}")
        # The identity components (devices.identity) the token's bound set is checked
        # against: given, or read when the device id is read too (an explicit id alone
        # is checked as before).
        self.components = (
            dict(components)
            if components is not None
            else (read_components() if device_id is None else None)
        )
        check_engine_arguments(
            device_id=device_id,
            device_id_max=MAX_DEVICE_ID,
            clock=clock,
            air_gapped=air_gapped,
            clock_leeway=clock_leeway,
        )
        self._keys = trust_anchors(public_key, root_keys)
        self.state_dir = directory
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

    # -- persistence -----------------------------------------------------------------

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
        refusal = offline_check(claims, self.device_id, self.components)
        if refusal:
            raise WrongDevice(
                f"licence {lic} is {refusal}: it names device {claims['dev']!r}, this is "
                f"{self.device_id!r}"
            )
        with self._lock:
            now = self._now()
            held = self._statuses.get(lic)
            if held is not None and held.revoked:  # whatever the clock says
                raise Revoked(revoked_message(held))
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
            self._check_usable(now)
            return self._state or ACTIVE

    def _now(self) -> float:
        """The clock, checked: a reading that is not an int or float in 0..LAST_SECOND
        (NaN, a Decimal, a bool, a huge int), or a clock that raises, is refused with
        CLOCK_INVALID before it can move the high-water mark or a period."""
        try:
            now = self._clock()
        except Exception as exc:
            raise LicenseError(
                f"the clock failed ({type(exc).__name__}: {shown(str(exc))}); nothing was "
                "counted or written",
                code=Code.CLOCK_INVALID,
            ) from exc
        if is_real(now) and 0 <= now <= LAST_SECOND:
            return now
        raise LicenseError(
            f"the clock read {shown(now)}, not a Unix time (int or float) in "
            f"0..{LAST_SECOND}; nothing was counted or written",
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
        revoked), or it says suspended. Taken at start and after every sync. Also takes
        the check-in lease end of the newest status held (0: none), which
        :meth:`_check_usable` compares with the clock's high-water mark."""
        self._refusal = None
        self._lease_end = 0
        if self._lic is None or self._token is None:
            return
        held = self._statuses.get(self._lic)
        if held is not None:
            self._lease_end = held.lease_end
        if held is not None and held.revoked:
            self._refusal = (Revoked, revoked_message(held), Revoked.code)
            return
        if held is not None and held.suspended:
            message = (
                f"licence {self._lic} is suspended (signed status of {held.issued_at}); "
                "analytics resume at the sync after it is reinstated, video continues"
            )
            self._refusal = (Suspended, message, Suspended.code)
            return
        try:
            verify_token(self._token, self._keys)
        except BadSignature as exc:
            self._refusal = (type(exc), f"licence {self._lic}: {exc}", exc.code)

    def _check_usable(self, now: float) -> None:
        """The one refusal rule of :meth:`start`, :meth:`require` and :meth:`count`, in
        its order: Revoked, Suspended (or the signed refusal held), Expired after term
        and grace, LeaseExpired once the clock passed the check-in lease of the newest
        status held, SyncRequired while evidence is missing.

        The lease is compared with the later of ``now`` and the high-water mark, so
        setting the clock back never brings a lapsed lease back."""
        if self._refusal is not None:
            raise self._refused()
        if self._expired:
            raise Expired(self._expired_message())
        if self._lease_end and max(now, self._hwm) > self._lease_end:
            raise LeaseExpired(
                f"licence {self._lic}: check-in lease ended at {self._lease_end} and this "
                f"device has not synced since (clock {math.floor(max(now, self._hwm))}); "
                "analytics resume after a successful sync(), video continues"
            )
        if self._blocked is not None:
            raise SyncRequired(self._blocked)

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
        # A period is open or spooled, never both: one found in the spool (the clock came
        # back into it, or a file was edited) is taken out and counted on from its
        # counts, so closing it again spools the sum, not the larger of two parts.
        resumed = self._spool.take((self._period_start, self._period_end))
        self._counters = [resumed[name] for name in COUNTER_FIELDS] if resumed else [0, 0, 0, 0]
        self._journaled = ()
        self._persist(now)

    def _due(self, now: float) -> bool:
        """Whether the slow path (term, period roll-over, checkpoint) is due at ``now``:
        the clock reached the next event, or stepped back behind the second of the last
        checkpoint. A step back takes it at most once per real second (``time.monotonic``):
        a clock toggling between t and t+1 would otherwise write the state on every call."""
        if now >= self._next_event:
            return True
        if now >= self._since:
            return False
        return time.monotonic() - self._stepped_back_at >= CHECKPOINT_SECONDS

    def _advance(self, now: float) -> None:
        """Taken when the clock passes the next event: at most about once per clock
        second, and at period and term boundaries."""
        if self._claims is None:
            raise _not_started()
        if now < self._since:
            self._stepped_back_at = time.monotonic()
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
        # A clock stepped back (within the leeway) behind this second checkpoints too,
        # once per clock second as ever: a crash then loses at most about one second.
        self._since = math.floor(now)

    def _advance_for_video(self, now: float) -> None:
        """The video path checkpoints too, but a failing disk must not stop it."""
        with self._lock:
            if not self._due(now):
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
            if self._due(now):
                self._advance(now)
            self._check_usable(now)
            assert self._claims is not None
            if self._claims["ent"].get(module) is not True:
                raise NotEntitled(f"licence {self._lic} does not include module {shown(module)}")

    def count(
        self, inferences: int = 0, frames: int = 0, stream_seconds: int = 0, events: int = 0
    ) -> None:
        """Meter usage. Nothing is counted when it raises: QuotaExceeded when
        ``inferences`` would pass ``lim.api_calls``; InvalidArgument for a count that is
        not a whole number >= 0; LicenseError USAGE_OUT_OF_RANGE when a count, or a
        counter of the open period with it, would pass what the service accepts for one
        record (:data:`devices.bounds.MAX_COUNTER`); Revoked, Expired, SyncRequired as
        :meth:`require`; LicenseError CLOCK_INVALID."""
        for value in (inferences, frames, stream_seconds, events):
            if type(value) is not int or value < 0:
                raise InvalidArgument(
                    f"usage counts must be whole numbers >= 0, not {shown(value)}"
                )
            if value > MAX_COUNTER:
                raise LicenseError(
                    f"a count of {shown(value)} is more than {MAX_COUNTER}, the most the "
                    "service accepts in one record; nothing counted",
                    code=Code.USAGE_OUT_OF_RANGE,
                )
        with self._lock:
            now = self._now()
            if self._due(now):
                self._advance(now)
            self._check_usable(now)
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
            stream = Stream(self._streams_total, self)
        try:
            yield stream
        finally:
            with self._lock:
                stream.open = False
                self._streams_open -= 1

    def admit_frame(self, stream: Stream) -> bool:
        """True when ``stream`` may take another frame in this second (``lim.max_fps``);
        never raises because of the licence term or a revocation (InvalidArgument for
        something that is not a stream of this module, LicenseError CLOCK_INVALID for a
        clock reading outside 0..LAST_SECOND).

        Windows never move backwards, so no clock can buy frames: a new window opens
        when the clock reaches a later second than the current one's, and a reading
        earlier than it (a clock toggling between t and t+1, stepping back) counts in
        the current window. So that a clock stepped back (NTP) cannot stall the video
        until it catches up, the window also opens again once a real second has passed
        (``time.monotonic``, which no clock setting moves): a stream never takes more
        than ``max_fps`` frames per real second plus those of the seconds the clock
        moved ahead."""
        if type(stream) is not Stream:
            raise InvalidArgument(f"admit_frame takes a Stream, not {type(stream).__name__}")
        if stream._engine is not self:  # a Stream() made by hand would pass max_streams
            raise InvalidArgument("admit_frame takes a stream this engine's open_stream() opened")
        now = self._now()
        if self._due(now):
            self._advance_for_video(now)
        return stream.admit(now, self._max_fps)

    # -- network ---------------------------------------------------------------------

    def revoked_licenses(self) -> frozenset[str]:
        """Licence ids this device holds whose verified status says revoked."""
        return frozenset(lic for lic, status in self._statuses.items() if status.revoked)

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
        """The verified claims of the licence held (``lic``, ``sku``, ``ent``, ``lim``,
        ``exp``...), or None before start."""
        return self._claims

    @property
    def license_id(self) -> str | None:
        """The id of the licence held (its ``lic`` claim), or None before start."""
        return self._lic

    @property
    def quota_used(self) -> int:
        """Inferences counted against ``lim.api_calls`` this term, on this device and as
        the service's signed receipts hold them (the larger; never lowered by a file)."""
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
    def key_fingerprint(self) -> str:
        """Fingerprint of the pinned key, or of the root keys (comma-separated)."""
        keys = [self._keys.pinned] if self._keys.pinned is not None else self._keys.roots.values()
        return ",".join(key_fingerprint(key) for key in keys)
