"""The shared cache (``CACHE_URL``: Redis in production) as request paths may use it:
an optimisation, never a dependency.

A cache that is down, slow or refusing makes a read a miss and a write a no-op, so a
request builds what it needs (the revocation list's answers) or decides elsewhere (the
activation limit falls back to the database, :mod:`ratelimits.counters`): it never
answers 500 because of the cache, and nothing it wrote to the database goes unanswered.
The socket timeouts in ``config/settings.py`` bound how long a hung Redis can hold a
request. An outage is logged by :data:`OUTAGE`: its first failure, then at most one line
per :data:`LOG_EVERY` seconds per process while it lasts (the rate limits' failures
included), and one line when the cache answers again; ``/healthz`` reports the state
seen last (:func:`state`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.core.cache import cache

log = logging.getLogger(__name__)

LOG_EVERY = 60.0  # seconds between two logged failures of this process
CHECK_REUSE_SECONDS = 1.0  # a /healthz ping reused this long

_checked: list[tuple[float, bool]] = []  # (monotonic time, ok) of the last ping


class OutageLog:
    """The cache's failures, logged at most once per ``every`` seconds of ``clock`` (a
    monotonic one: a stepped wall clock must neither flood nor silence it) while they
    last, and once when an outage that was logged ends: under load an outage is a line
    a minute per process, not a line per request. Tests inject the clock."""

    def __init__(
        self, logger: logging.Logger, *, every: float = LOG_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.log, self.every, self.clock = logger, every, clock
        self.down_since: float | None = None  # None: answering
        self.logged_at = float("-inf")
        self.unlogged = 0  # failures since the last line
        self.logged_this_outage = False
        self._lock = threading.Lock()

    def failed(self, operation: str, exc: BaseException, doing: str) -> None:
        with self._lock:
            now = self.clock()
            if self.down_since is None:
                self.down_since = now
            if now - self.logged_at < self.every:
                self.unlogged += 1
                return
            unlogged, self.unlogged = self.unlogged, 0
            self.logged_at, self.logged_this_outage = now, True
        more = f" ({unlogged} more failures since the last line)" if unlogged else ""
        self.log.warning(
            "shared cache unavailable (%s: %s); %s%s", operation, type(exc).__name__, doing, more
        )

    def answered(self) -> None:
        if self.down_since is None:  # the common case: no lock, no clock
            return
        with self._lock:
            if self.down_since is None:
                return
            lasted = self.clock() - self.down_since
            logged, self.logged_this_outage = self.logged_this_outage, False
            self.down_since, self.unlogged = None, 0
        if logged:
            self.log.warning("shared cache answering again after %.0f s", lasted)


OUTAGE = OutageLog(log)


def failed(operation: str, exc: BaseException, doing: str = "serving without it") -> None:
    """Record a failure of the cache (logged as :class:`OutageLog` says)."""
    OUTAGE.failed(operation, exc, doing)


def answered() -> None:
    """Record that the cache answered (ends an outage, logging it once)."""
    OUTAGE.answered()


def get(key: str) -> Any:
    """The cached value, or None when absent or when the cache cannot answer."""
    try:
        value = cache.get(key)
    except Exception as exc:  # noqa: BLE001 - any backend's failure is a miss
        failed("get", exc)
        return None
    answered()
    return value


def set_many(values: dict[str, Any], timeout: float) -> None:
    try:
        cache.set_many(values, timeout)
    except Exception as exc:  # noqa: BLE001 - the answer is served uncached
        failed("set", exc)
        return
    answered()


def clear() -> None:
    try:
        cache.clear()
    except Exception as exc:  # noqa: BLE001
        failed("clear", exc)


def state() -> str:
    """``"ok"`` or why not, from one write-and-read ping (reused for a second)."""
    now = time.monotonic()
    if _checked and now - _checked[0][0] < CHECK_REUSE_SECONDS:
        ok = _checked[0][1]
    else:
        try:
            cache.set("healthz:ping", 1, 30)
            ok = cache.get("healthz:ping") == 1
        except Exception as exc:  # noqa: BLE001
            failed("ping", exc)
            ok = False
        else:
            answered()
        _checked[:] = [(now, ok)]
    return "ok" if ok else "unavailable: serving without it (answers built per process)"
