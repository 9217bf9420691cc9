"""The shared cache (``CACHE_URL``: Redis in production) as request paths may use it:
an optimisation, never a dependency.

A cache that is down, slow or refusing makes a read a miss and a write a no-op, so a
request builds what it needs (the revocation list's answers) or decides elsewhere (the
activation limit falls back to the database, :mod:`ratelimits.counters`): it never
answers 500 because of the cache, and nothing it wrote to the database goes unanswered.
The socket timeouts in ``config/settings.py`` bound how long a hung Redis can hold a
request. The first failure in a while is logged (once per :data:`LOG_EVERY` seconds per
process, so an outage does not flood the log) and ``/healthz`` reports the state seen
last (:func:`state`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.cache import cache

log = logging.getLogger(__name__)

LOG_EVERY = 60.0  # seconds between two logged failures of this process
CHECK_REUSE_SECONDS = 1.0  # a /healthz ping reused this long

_failed_at = [float("-inf")]  # time.monotonic() of the last failure
_logged_at = [float("-inf")]
_checked: list[tuple[float, bool]] = []  # (monotonic time, ok) of the last ping


def _failed(operation: str, exc: Exception) -> None:
    now = time.monotonic()
    _failed_at[0] = now
    if now - _logged_at[0] >= LOG_EVERY:
        _logged_at[0] = now
        log.warning(
            "shared cache unavailable (%s: %s); serving without it", operation, type(exc).__name__
        )


def get(key: str) -> Any:
    """The cached value, or None when absent or when the cache cannot answer."""
    try:
        return cache.get(key)
    except Exception as exc:  # noqa: BLE001 - any backend's failure is a miss
        _failed("get", exc)
        return None


def set_many(values: dict[str, Any], timeout: float) -> None:
    try:
        cache.set_many(values, timeout)
    except Exception as exc:  # noqa: BLE001 - the answer is served uncached
        _failed("set", exc)


def clear() -> None:
    try:
        cache.clear()
    except Exception as exc:  # noqa: BLE001
        _failed("clear", exc)


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
            _failed("ping", exc)
            ok = False
        _checked[:] = [(now, ok)]
    return "ok" if ok else "unavailable: serving without it (answers built per process)"
