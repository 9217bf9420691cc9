"""Rate limits by a sliding log: exact in every span, shared by every worker and node.

A limit of ``limit`` requests per ``span`` seconds keeps, per key (the limit's name and a
client), a log of the instants it admitted. A request at instant ``t`` is admitted only
if fewer than ``limit`` logged instants lie in ``[t - span, t]``; then ``t`` is logged.
Instants older than ``t - span`` are dropped as they pass. So:

- **no closed interval of ``span`` seconds, wherever it starts, holds more than
  ``limit`` admitted requests.** Suppose one held ``limit + 1``; take the one admitted
  last, at ``t``. The log's instants never decrease (below), so the other ``limit`` are
  earlier and lie in ``[t - span, t]``: they were in the log when it was decided, and it
  was refused. A refusal is no looser than that either: it means ``limit`` requests were
  admitted in ``[t - span, t]``, so admitting one more would break the bound.
- **a refused request is not logged.** A client that keeps retrying is admitted again
  as soon as its oldest counted request leaves the span, never later, so retrying costs
  it nothing and gains it nothing: it gets ``limit`` per ``span`` at most, as everyone.
  ``retry_after`` is that wait in whole seconds, rounded up past the instant (at least
  1): the first whole second at which the request would be admitted.
- **one clock decides**, the store's, not each node's: nodes whose clocks disagree
  still agree on the log. An instant earlier than the newest logged one (the store's
  clock stepped back) is taken as the newest, so the log's order is the order of the
  decisions and the proof above holds.

Where the log lives:

- **Redis**, when the cache is Redis (``CACHE_URL=redis://...``): a sorted set per key,
  scored in microseconds of Redis's clock (``TIME``). One Lua script (registered once,
  sent as ``EVALSHA``: one round trip) drops the old instants, counts, adds this one and
  sets the key to expire with its last instant (``ZREMRANGEBYSCORE``, ``ZCARD``, ``ZADD``,
  ``PEXPIRE``). Redis runs one script at a time, so the decision is atomic across every
  worker and node. Needs Redis 5 or later (``TIME`` in a script that writes).
- **the database** otherwise (local memory in ``make run`` and the tests), and for any
  request during which Redis raises an error (down, unreachable, refusing writes): a row
  per key (:class:`ratelimits.models.RateLog`) holding at most ``limit`` instants. One
  statement locks the row, creating it if need be (an upsert, whose update takes the
  row lock ``select_for_update`` would; on SQLite the ``BEGIN IMMEDIATE`` of
  ``transaction.atomic`` takes the database's write lock first) and reads the log and,
  on PostgreSQL, the database's clock; one more writes an admitted request back.
  Concurrent workers queue on that lock, so none over-admits. SQLite is one file on one
  host, so its clock is that host's.

The two stores do not share their logs: while requests switch from Redis to the
database or back (an outage, its end, a Redis restart that lost its data), a client's
earlier requests in the other store are not seen, and it may be admitted up to
``limit`` more in that ``span``. Call :func:`hit` outside a transaction: inside one, its
lock would be held, and its hit undone, with the enclosing transaction.
"""

from __future__ import annotations

import random
import time
from bisect import bisect_left
from dataclasses import dataclass

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.db import connection, transaction
from redis.commands.core import Script
from redis.exceptions import RedisError

from config import sharedcache
from ratelimits.models import RateLog

MICROSECONDS = 1_000_000
# The database store deletes expired logs on one call in this many, drawn at random
# (0: never; the tests pin it, so what a request costs the database is one number).
PURGE_ONE_IN = 200
KEY_PREFIX = "ratelimit"

# KEYS[1]: the key's log, a sorted set of admitted instants (members unique, scores in
# Unix microseconds). ARGV: limit, span in microseconds, "1" to log an admitted request
# ("0" to only ask), and an instant to use instead of Redis's clock ("" for TIME: tests).
# Returns {admitted (1/0), requests in the span (with this one if logged), microseconds
# until the request deciding a refusal leaves the span (0 when admitted)}.
SLIDING_LOG_LUA = """
local key = KEYS[1]
local limit, span = tonumber(ARGV[1]), tonumber(ARGV[2])
local clock
if ARGV[4] == '' then
  local t = redis.call('TIME')
  clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  clock = tonumber(ARGV[4])
end
local now = clock
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if newest[2] and tonumber(newest[2]) > now then now = tonumber(newest[2]) end
redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. string.format('%d', now - span))
local seen = redis.call('ZCARD', key)
if seen < limit then
  if ARGV[3] == '1' then
    -- Unique: at one instant the count only grows, and instants never go back.
    redis.call('ZADD', key, string.format('%d', now), string.format('%d-%d', now, seen))
    redis.call('PEXPIRE', key, math.floor((now - clock + span) / 1000) + 1)
    seen = seen + 1
  end
  return {1, seen, 0}
end
local deciding = redis.call('ZRANGE', key, seen - limit, seen - limit, 'WITHSCORES')
return {0, seen, tonumber(deciding[2]) + span - now}
"""
_script: Script | None = None  # registered with the first Redis client, then EVALSHA


@dataclass(frozen=True)
class Decision:
    allowed: bool
    seen: int  # requests admitted in the last ``span`` seconds, this one if it was logged
    retry_after: int  # whole seconds until a request would be admitted; 0 if this one was


def hit(name: str, client: str, *, limit: int, span: int, now: float | None = None) -> Decision:
    """Decide one request of ``client`` under the limit ``name`` (``limit`` requests in
    any ``span`` seconds) and log it if admitted. ``now`` (Unix seconds) replaces the
    store's clock: for tests."""
    return _decide(f"{name}:{client}", limit=limit, span=span, now=now, count=True)


def peek(name: str, client: str, *, limit: int, span: int, now: float | None = None) -> Decision:
    """Whether a request of ``client`` would be admitted under ``name`` now, logging
    nothing."""
    return _decide(f"{name}:{client}", limit=limit, span=span, now=now, count=False)


def admit(
    hits: list[int], *, now: int, limit: int, span: int, count: bool
) -> tuple[Decision, list[int]]:
    """The sliding log's decision on ``hits`` (ascending instants, microseconds) for a
    request at ``now``, with ``span`` in microseconds: the decision, and the log to keep
    (without the instants that left the span; with ``now`` if admitted and counted).
    The database store runs this; ``SLIDING_LOG_LUA`` is the same steps in Redis."""
    if hits and hits[-1] > now:
        now = hits[-1]
    live = hits[bisect_left(hits, now - span) :]
    if len(live) < limit:
        if count:
            live.append(now)
        return Decision(allowed=True, seen=len(live), retry_after=0), live
    wait = live[len(live) - limit] + span - now
    return Decision(allowed=False, seen=len(live), retry_after=_seconds_past(wait)), live


def _seconds_past(wait: int) -> int:
    """Whole seconds strictly past ``wait`` microseconds: a logged instant still counts at
    exactly ``span`` seconds old, so the request is admitted just after."""
    return wait // MICROSECONDS + 1


def _decide(key: str, *, limit: int, span: int, now: float | None, count: bool) -> Decision:
    if limit < 1:  # nothing is ever admitted
        return Decision(allowed=False, seen=0, retry_after=max(span, 1))
    at = None if now is None else round(now * MICROSECONDS)
    cache = caches["default"]
    if isinstance(cache, RedisCache):
        try:
            decision = _redis_decide(cache, key, limit=limit, span=span, at=at, count=count)
        except RedisError as error:
            # Redis down or refusing: decide in the database for this request rather
            # than answer 500 or let everyone through (logged once a minute, not per
            # request).
            sharedcache.failed("rate limit", error, "deciding rate limits in the database")
        else:
            sharedcache.answered()
            return decision
    return _database_decide(key, limit=limit, span=span, at=at, count=count)


# --- Redis ----------------------------------------------------------------------------


def _redis_decide(
    cache: RedisCache, key: str, *, limit: int, span: int, at: int | None, count: bool
) -> Decision:
    global _script
    name = cache.make_and_validate_key(f"{KEY_PREFIX}:{key}")
    # Django's cache API has no sorted sets; its Redis client (the cache's pool) does.
    client = cache._cache.get_client(name, write=True)
    if _script is None:
        _script = client.register_script(SLIDING_LOG_LUA)
    admitted, seen, wait = _script(
        keys=[name],
        args=[limit, span * MICROSECONDS, int(count), "" if at is None else at],
        client=client,
    )
    if admitted:
        return Decision(allowed=True, seen=int(seen), retry_after=0)
    return Decision(allowed=False, seen=int(seen), retry_after=_seconds_past(int(wait)))


# --- the database ---------------------------------------------------------------------

# One statement locks the key's row, creating it if need be: the upsert's update changes
# nothing, but it takes the row lock (select_for_update's) and returns the log. On
# PostgreSQL it also returns the database's clock, read after the lock (unlike now()).
_LOCK = (
    "INSERT INTO ratelimits_ratelog (key, hits, expires) VALUES (%s, '', 0) "
    "ON CONFLICT (key) DO UPDATE SET expires = ratelimits_ratelog.expires RETURNING hits"
)
_LOCK_PG = (
    "INSERT INTO ratelimits_ratelog (key, hits, expires) VALUES (%s, '', 0) "
    "ON CONFLICT (key) DO UPDATE SET expires = ratelimits_ratelog.expires RETURNING hits, "
    "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS bigint)"
)
_READ = "SELECT hits FROM ratelimits_ratelog WHERE key = %s"
_READ_PG = (
    "SELECT (SELECT hits FROM ratelimits_ratelog WHERE key = %s), "
    "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS bigint)"
)


def _database_decide(key: str, *, limit: int, span: int, at: int | None, count: bool) -> Decision:
    span_us = span * MICROSECONDS
    postgres = connection.vendor == "postgresql"
    if not count:
        with connection.cursor() as cursor:
            cursor.execute(_READ_PG if postgres else _READ, [key])
            text, *clock = cursor.fetchone() or [None]
        now = _now(at, clock[0] if clock else None)
        return admit(_parse(text), now=now, limit=limit, span=span_us, count=False)[0]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_LOCK_PG if postgres else _LOCK, [key])
        text, *clock = cursor.fetchone()
        now = _now(at, clock[0] if clock else None)
        decision, hits = admit(_parse(text), now=now, limit=limit, span=span_us, count=True)
        if decision.allowed:
            expires = (hits[-1] + span_us) // MICROSECONDS + 1
            RateLog.objects.filter(pk=key).update(hits=" ".join(map(str, hits)), expires=expires)
    if PURGE_ONE_IN and random.randrange(PURGE_ONE_IN) == 0:  # noqa: S311 - a sampling
        RateLog.objects.filter(expires__lt=now // MICROSECONDS).delete()
    return decision


def _now(at: int | None, database_clock: int | None) -> int:
    """The instant to decide at: a test's, else PostgreSQL's, else this host's (SQLite
    lives on it), in Unix microseconds."""
    if at is not None:
        return at
    if database_clock is not None:
        return int(database_clock)
    return time.time_ns() // 1000


def _parse(text: str | None) -> list[int]:
    return [int(part) for part in text.split()] if text else []
