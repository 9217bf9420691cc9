"""Sliding-window rate limits shared by every worker and node.

A request counts the requests of the current fixed window plus the previous window's,
weighted by the share of it still inside the last ``span`` seconds, so no burst gets
twice the limit across a window boundary. The counters live in Redis when the cache
is Redis (``CACHE_URL=redis://...``; one round trip: a pipeline that counts this
request, keeps the counter for two windows and reads the previous one), otherwise in
the database (:class:`ratelimits.models.RateCounter`: an atomic upsert and a read),
which every process and node shares too. Local memory would hold per process only.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.db import connection, transaction
from redis.exceptions import RedisError

from ratelimits.models import RateCounter

log = logging.getLogger(__name__)

PURGE_ONE_IN = 200  # the database store deletes expired counters on one call in this many
_UPSERT = (
    "INSERT INTO ratelimits_ratecounter (key, count, expires) VALUES (%s, 1, %s) "
    "ON CONFLICT (key) DO UPDATE SET count = ratelimits_ratecounter.count + 1 "
    "RETURNING count"
)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    seen: float  # requests in the last ``span`` seconds, this one included (weighted)
    retry_after: int  # seconds until the window moves on


def hit(name: str, client: str, *, limit: int, span: int, now: float | None = None) -> Decision:
    """Count one request of ``client`` under the limit ``name`` (``limit`` requests per
    ``span`` seconds) and decide whether it is allowed."""
    return _decide(name, client, limit=limit, span=span, now=now, count=True)


def peek(name: str, client: str, *, limit: int, span: int, now: float | None = None) -> Decision:
    """Whether ``client`` is over the limit ``name`` now, without counting a request."""
    return _decide(name, client, limit=limit, span=span, now=now, count=False)


def _decide(
    name: str, client: str, *, limit: int, span: int, now: float | None, count: bool
) -> Decision:
    moment = time.time() if now is None else now
    window, into = divmod(moment, span)
    key = f"{name}:{client}"
    current, previous = f"{key}:{int(window)}", f"{key}:{int(window) - 1}"
    if count:
        mine, before = _counted(key, current, previous, span, int(moment))
    else:
        mine, before = _read(key, current, previous)
    seen = before * (1 - into / span) + mine
    # A counted request is in ``seen`` already; a peek asks whether one more would fit.
    allowed = seen <= limit if count else seen < limit
    return Decision(allowed=allowed, seen=seen, retry_after=int(span - into) + 1)


def _redis(*keys: str) -> tuple[object, list[str]] | None:
    """The Redis client and the cache's names for ``keys`` when the cache is Redis."""
    cache = caches["default"]
    if not isinstance(cache, RedisCache):
        return None
    names = [cache.make_and_validate_key(k) for k in keys]
    return cache._cache.get_client(names[0], write=True), names


def _read(key: str, current: str, previous: str) -> tuple[int, int]:
    redis = _redis(current, previous)
    if redis is not None:
        client, names = redis
        try:
            mine, before = client.mget(names)
            return int(mine or 0), int(before or 0)
        except RedisError:
            log.warning("rate limit %s: Redis unreachable, reading the database", key)
    counts = dict(
        RateCounter.objects.filter(pk__in=[current, previous]).values_list("key", "count")
    )
    return counts.get(current, 0), counts.get(previous, 0)


def _counted(key: str, current: str, previous: str, span: int, now: int) -> tuple[int, int]:
    """(requests in this window counting this one, requests in the window before)."""
    redis = _redis(current, previous)
    if redis is not None:
        # Django's cache API would take three round trips (get, then incr = exists +
        # incr); its Redis client takes one.
        client, names = redis
        try:
            pipe = client.pipeline(transaction=False)
            pipe.incr(names[0])
            pipe.expire(names[0], 2 * span + 1)
            pipe.get(names[1])
            mine, _, before = pipe.execute()
            return int(mine), int(before or 0)
        except RedisError:
            # Redis down: count in the database meanwhile rather than refuse everyone.
            log.warning("rate limit %s: Redis unreachable, counting in the database", key)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_UPSERT, [current, now + 2 * span + 1])
        (mine,) = cursor.fetchone()
    before = RateCounter.objects.filter(pk=previous).values_list("count", flat=True).first()
    if random.randrange(PURGE_ONE_IN) == 0:  # noqa: S311 - not a secret, a sampling
        RateCounter.objects.filter(expires__lt=now).delete()
    return mine, before or 0
