"""Reads from a PostgreSQL streaming replica (``SVC_DATABASE_REPLICA_URL``), per request.

A request is replica-eligible when it is a GET or HEAD of a view named in
:data:`REPLICA_VIEWS` (or a console list, ``admin:*_changelist``): the device reads
that tolerate seconds of lag and the console's and admin API's heavy reads. Nothing
else changes: every write, every other view, and every read of a request that wrote
goes to the primary. Marking is by URL name (:class:`ReplicaReadsMiddleware`), so a
view's internals never know.

:class:`ReplicaRouter` sends a read of an eligible request to ``replica`` only when:

- nothing was written in this request and no transaction is open on the primary
  (read-your-writes: a write routes every later read of the request to the primary);
- the replica is up and its lag (the server's clock minus the time of the last
  transaction it replayed, 0 when it has replayed all it received) is at most
  ``SVC_REPLICA_MAX_LAG_SECONDS``. The check is one query per process at most every
  ``SVC_REPLICA_CHECK_SECONDS``; a replica that fails is left alone for
  :data:`DOWN_SECONDS`.

An answer read from the replica is done again on the primary (the middleware calls the
view again; GET and HEAD only, so repeating is safe) when the replica failed under it
(killed mid-request: no 5xx), when the request wrote after reading the replica (its
reads may have been stale; :class:`ReplicaWriteAfterRead` stops it at the write), or
when it is an error (>= 400: the replica may not yet hold what the client knows, a
licence just issued or a list sequence number just answered) or, for the licence
refresh, anything but 304 (the replica answers only "nothing changed")."""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.db import connections
from django.http import HttpRequest, HttpResponse

from config import clock, metrics
from config.errors import ServiceError

PRIMARY, REPLICA = "default", "replica"
DOWN_SECONDS = 5.0  # a replica that failed is not asked again for this long

# URL names (``namespace:name``) whose GET/HEAD may read the replica, and the answers
# from it that stand (others are done again on the primary).
REPLICA_VIEWS: dict[str, Callable[[int], bool]] = {
    # Devices: the revocation list's pages and a licence's status on it, and the
    # licence refresh when nothing changed (a 304; anything else comes from the primary).
    "revocations": lambda status: status < 400,
    "revocations-status": lambda status: status < 400,
    "license-refresh": lambda status: status == 304,
    # Admin API lists and previews (never issuing: those are POSTs).
    "admin-fleet": lambda status: status < 400,
    "admin-expiring": lambda status: status < 400,
    "admin-invoices": lambda status: status < 400,
    "admin-invoice": lambda status: status < 400,  # the rating preview of a period
    "admin-events": lambda status: status < 400,
    "admin-usage-conflicts": lambda status: status < 400,
    "admin-license-usage": lambda status: status < 400,
    # Console: dashboard, invoice preview (console lists: any admin changelist).
    "console-dashboard": lambda status: status < 400,
    "console-invoice-preview": lambda status: status < 400,
}
_CHANGELIST = lambda status: status < 400  # noqa: E731 - same rule as the lists above
# Logins, sessions, second factors, lockouts and rate counters are read where they are
# written, whatever the request: a session made a moment ago is on the primary only.
PRIMARY_APPS = frozenset(
    {
        "sessions",
        "auth",
        "admin",
        "axes",
        "otp_totp",
        "otp_static",
        "django_otp",
        "operators",
        "ratelimits",
    }
)


def replica_rule(view_name: str | None) -> Callable[[int], bool] | None:
    """The acceptance rule of a replica-eligible view, None when it reads the primary."""
    if not view_name:
        return None
    rule = REPLICA_VIEWS.get(view_name)
    if rule is None and view_name.startswith("admin:") and view_name.endswith("_changelist"):
        return _CHANGELIST
    return rule


class ReplicaWriteAfterRead(ServiceError):
    """A request that read the replica goes on to write: stopped here, and done again on
    the primary by the middleware (never answered)."""

    status_code = 503
    retry_after = 1

    def __init__(self) -> None:
        super().__init__("read from a replica before a write; done again on the primary")


@dataclass
class RequestReads:
    """What the router knows of the request it routes for."""

    accept: Callable[[int], bool] | None = None  # None: not eligible
    wrote: bool = False
    used_replica: bool = False
    failed: bool = False  # a query on the replica failed
    aborted: bool = False  # a write after a replica read
    reason: str = ""  # why an eligible read went to the primary (metrics)


_request: contextvars.ContextVar[RequestReads | None] = contextvars.ContextVar(
    "replica_reads", default=None
)


class _Health:
    """The process's view of the replica: its lag as last checked, and whether it is
    down. Checked at most every SVC_REPLICA_CHECK_SECONDS, by one thread at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # held by the thread checking, never waited for
        self.checked_at = -math.inf  # time.monotonic() of the last check
        self.lag: float | None = None  # seconds; None: unknown (down)
        self.down_until = -math.inf

    def forget(self) -> None:
        self.checked_at, self.lag, self.down_until = -math.inf, None, -math.inf

    def mark_down(self) -> None:
        # No lock: plain assignments, and a request thread never waits on a slow check.
        self.down_until = time.monotonic() + DOWN_SECONDS
        self.lag, self.checked_at = None, -math.inf

    def verdict(self) -> str:
        """Why reads may not go to the replica now ("down", "lag"); "" when they may."""
        moment = time.monotonic()
        if moment < self.down_until:
            return "down"
        if moment - self.checked_at >= settings.SVC_REPLICA_CHECK_SECONDS and self.lock.acquire(
            blocking=False
        ):
            try:
                self.lag = replica_lag()
                self.checked_at = time.monotonic()
                if self.lag is None:
                    self.down_until = self.checked_at + DOWN_SECONDS
            finally:
                self.lock.release()
        if self.lag is None:
            return "down"
        return "lag" if self.lag > settings.SVC_REPLICA_MAX_LAG_SECONDS else ""


health = _Health()

LAG_SQL = (
    "SELECT pg_is_in_recovery(), "
    "pg_last_wal_receive_lsn() IS NOT NULL "
    "AND pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn(), "
    "pg_last_xact_replay_timestamp()"
)


def replica_lag() -> float | None:
    """The replica's lag in seconds by the server's clock (:func:`config.clock.now`): 0
    when it has replayed everything it received (an idle primary sends nothing, and a
    replica that is current must not look late), else the time since the last
    transaction it replayed. None when it cannot be asked."""
    state = _request.get()
    failed = state.failed if state is not None else False
    try:
        with connections[REPLICA].cursor() as cursor:
            cursor.execute(LAG_SQL)
            in_recovery, caught_up, replayed_at = cursor.fetchone()
    except Exception:  # noqa: BLE001 - any failure means: not usable now
        connections[REPLICA].close_if_unusable_or_obsolete()
        return None
    finally:
        if state is not None:
            state.failed = failed  # a failed check is a fallback, not a failed read
    if not in_recovery or caught_up:
        return 0.0
    if replayed_at is None:
        return math.inf
    return max(0.0, (clock.now() - replayed_at).total_seconds())


def replica_failed() -> None:
    """The replica connection failed (``config.db.replica``): the request's answer is
    done again on the primary and the replica is left alone a while."""
    health.mark_down()
    state = _request.get()
    if state is not None:
        state.failed = True


def primary_from_now() -> bool:
    """The rest of this request reads and writes the primary. True when it had read the
    replica: the caller reads again there what it is about to write from (a status to
    sign and store), instead of writing, being stopped (:class:`ReplicaWriteAfterRead`)
    and done again from the start, its signature wasted."""
    state = _request.get()
    if state is None or not state.used_replica:
        return False
    state.used_replica = False
    state.wrote = True  # every later read of the request on the primary
    state.reason = state.reason or "wrote"
    return True


class ReplicaRouter:
    """``DATABASE_ROUTERS`` when a replica is configured (see the module's docstring)."""

    def db_for_read(self, model, **hints) -> str:
        state = _request.get()
        if state is None or state.accept is None or model._meta.app_label in PRIMARY_APPS:
            return PRIMARY
        if state.used_replica:
            return REPLICA  # one source for the whole request
        if state.wrote or connections[PRIMARY].in_atomic_block:
            state.reason = state.reason or "wrote"
            return PRIMARY
        reason = health.verdict()
        if reason:
            state.reason = state.reason or reason
            return PRIMARY
        state.used_replica = True
        return REPLICA

    def db_for_write(self, model, **hints) -> str:
        state = _request.get()
        if state is not None:
            if (
                state.used_replica
                and not state.aborted
                and model._meta.app_label not in PRIMARY_APPS
            ):
                state.aborted = True
                raise ReplicaWriteAfterRead()
            state.wrote = True
        return PRIMARY

    def allow_relation(self, obj1, obj2, **hints) -> bool | None:
        if {obj1._state.db, obj2._state.db} <= {PRIMARY, REPLICA}:
            return True
        return None

    def allow_migrate(self, db: str, app_label: str, **hints) -> bool | None:
        return False if db == REPLICA else None


class ReplicaReadsMiddleware:
    """Marks a replica-eligible request (by its URL name, :func:`replica_rule`) for
    :class:`ReplicaRouter`, and does an answer read from the replica again on the
    primary when it may not stand. Without a replica it is left out of the chain
    (MiddlewareNotUsed): the device path pays nothing for it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.enabled = REPLICA in settings.DATABASES
        if not self.enabled:
            raise MiddlewareNotUsed("no replica (SVC_DATABASE_REPLICA_URL)")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not self.enabled:
            return self.get_response(request)
        state = RequestReads()
        token = _request.set(state)
        try:
            response = self.get_response(request)
            if state.accept is None:
                return response
            if state.used_replica:
                why = _redo_reason(state, response)
                if not why:
                    metrics.REPLICA_READS.labels("replica").inc()
                    return response
                state.reason = why
                connections[REPLICA].close_if_unusable_or_obsolete()
                _request.set(RequestReads(reason=why))  # every read on the primary
                response = self.get_response(request)
            if state.reason:  # else it read nothing (an answer this process held)
                metrics.REPLICA_READS.labels("primary").inc()
                metrics.REPLICA_FALLBACKS.labels(state.reason).inc()
            return response
        finally:
            _request.reset(token)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs) -> None:
        state = _request.get()
        if state is not None and request.method in ("GET", "HEAD") and not state.reason:
            match = request.resolver_match
            state.accept = replica_rule(match.view_name if match else None)


def _redo_reason(state: RequestReads, response: HttpResponse) -> str:
    if state.failed:
        return "failed"
    if state.aborted:
        return "wrote"
    if not state.accept(response.status_code):
        return "answer"
    return ""
