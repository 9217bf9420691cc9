"""The sliding log (ratelimits.counters) with an injected clock, in both stores: Redis
(a private redis-server) and the database (SQLite or PostgreSQL, whichever the suite
runs on). The bound is exact: never more than the limit in any closed span, and never a
refusal with fewer than the limit in the span before it."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from django.db import connection

from ratelimits import counters
from ratelimits.models import RateLog
from tests.conftest import start_private_redis

pytestmark = pytest.mark.django_db

US = 1_000_000  # the log's unit: microseconds
LIMIT, SPAN = 20, 10
WINDOW_END = 1_700_000_010 * US  # a multiple of SPAN: where a fixed window ends


def _use_redis(settings, url: str) -> None:
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
    }


@pytest.fixture(params=["redis", "database"])
def store(request, settings):
    if request.param == "redis":
        server = request.getfixturevalue("private_redis")
        redis.Redis.from_url(server.url).flushdb()
        _use_redis(settings, server.url)
    yield request.param
    if request.param == "redis":
        assert not RateLog.objects.exists(), "Redis failed: the database decided"


def _replay(times: list[int], *, limit: int = LIMIT, span: int = SPAN, client: str = "ip"):
    """[(instant, decision)] of one request at each instant (microseconds)."""
    return [
        (t, counters.hit("activate", client, limit=limit, span=span, now=t / US)) for t in times
    ]


def _in_span(admitted: list[int], start: int, span: int = SPAN) -> int:
    return sum(1 for a in admitted if start <= a <= start + span * US)


def _assert_exact(decisions, *, limit: int = LIMIT, span: int = SPAN) -> list[int]:
    """At most ``limit`` admitted in any closed span of ``span`` seconds; each refusal had
    ``limit`` admitted in the span up to it, and its retry_after is the first whole
    second after which the oldest of them has left. Returns the admitted instants."""
    admitted = [t for t, d in decisions if d.allowed]
    for start in admitted:  # the busiest span starts at an admitted instant
        assert _in_span(admitted, start, span) <= limit, f"over the limit from {start}"
    for t, decision in decisions:
        if decision.allowed:
            continue
        before = [a for a in admitted if t - span * US <= a <= t]
        assert len(before) == limit, f"refused at {t} with {len(before)} in the span"
        leaves = before[0] + span * US  # admitted again just after this instant
        assert t + (decision.retry_after - 1) * US <= leaves < t + decision.retry_after * US
        assert decision.retry_after >= 1
    return admitted


def test_a_burst_at_a_windows_end_then_one_every_s_over_2n_never_exceeds_the_limit(store):
    """The issue's pattern: N in the last microseconds of a fixed window, then one every
    S/(2N). A weighted window admitted about 2N in the first span; the log admits N."""
    burst = [WINDOW_END - LIMIT + k for k in range(LIMIT)]
    steady = [WINDOW_END + k * SPAN * US // (2 * LIMIT) for k in range(1, 6 * LIMIT + 1)]
    decisions = _replay(burst + steady)
    admitted = _assert_exact(decisions)
    assert all(d.allowed for _, d in decisions[:LIMIT])
    # Refused until the burst has left the span: the first admitted request after it is
    # the one exactly S after the window's end (the burst is 1 to 20 µs older than that).
    after_burst = [t for t in admitted if t > WINDOW_END]
    assert after_burst[0] == WINDOW_END + SPAN * US
    first_refusal = decisions[LIMIT][1]
    assert not first_refusal.allowed and first_refusal.seen == LIMIT
    assert first_refusal.retry_after == 10  # 9.75 s and 20 µs, rounded up past
    # The log admits the limit in every span once saturated: 3 spans of S/(2N) pacing.
    assert len(after_burst) == 2 * LIMIT


def test_decisions_match_the_definition_on_random_traffic(store):
    """600 requests with bursts and pauses against a brute-force model of "at most N in
    any closed span of S", decision by decision."""
    rng = random.Random(22)
    limit, span = 5, 2
    times, t = [], WINDOW_END
    for _ in range(600):
        t += rng.choice([0, 1, rng.randrange(span * US // 20), rng.randrange(span * US)])
        times.append(t)
    decisions = _replay(times, limit=limit, span=span)
    admitted: list[int] = []
    for t, decision in decisions:
        expected = _in_span(admitted, t - span * US, span) < limit
        assert decision.allowed == expected, f"at {t}"
        if expected:
            admitted.append(t)
    _assert_exact(decisions, limit=limit, span=span)


def test_refused_requests_are_not_logged_and_the_span_is_closed(store):
    """A client that keeps retrying is admitted as soon as its oldest counted request
    leaves the span: a request exactly S after it is still refused, one a microsecond
    later is admitted."""
    decisions = _replay([0, US, 2 * US], limit=3)
    assert [d.allowed for _, d in decisions] == [True, True, True]
    hammering = _replay(list(range(2 * US + US // 10, 10 * US + 1, US // 10)), limit=3)
    assert not any(d.allowed for _, d in hammering)
    assert hammering[0][1].retry_after == 8  # at 2.1 s: the one at 0 leaves after 10 s
    assert hammering[-1][1].retry_after == 1  # at 10 s exactly: it still counts
    assert counters.hit("activate", "ip", limit=3, span=SPAN, now=(10 * US + 1) / US).allowed
    assert not counters.hit("activate", "ip", limit=3, span=SPAN, now=(10 * US + 2) / US).allowed


def test_peek_logs_nothing_and_clients_and_limits_are_separate(store):
    for _ in range(2):
        assert counters.peek("admin-key", "a", limit=2, span=SPAN, now=5).allowed
    assert all(counters.hit("admin-key", "a", limit=2, span=SPAN, now=5).allowed for _ in range(2))
    refused = counters.peek("admin-key", "a", limit=2, span=SPAN, now=6)
    assert (refused.allowed, refused.seen, refused.retry_after) == (False, 2, 10)
    assert not counters.hit("admin-key", "a", limit=2, span=SPAN, now=6).allowed
    assert counters.hit("admin-key", "b", limit=2, span=SPAN, now=6).allowed
    assert counters.hit("activate", "a", limit=2, span=SPAN, now=6).allowed


def test_a_lowered_limit_waits_for_enough_of_the_log_to_leave(store):
    _replay([k * US for k in range(4)], limit=4)
    refused = counters.hit("activate", "ip", limit=2, span=SPAN, now=5)
    # Four in the span, two allowed: admitted once the first three have left (after 12 s).
    assert (refused.allowed, refused.seen, refused.retry_after) == (False, 4, 8)


def test_the_stores_clock_decides_not_the_nodes(store, monkeypatch):
    """Two nodes whose clocks are an hour apart, alternating: still N, because the instant
    is Redis's (TIME) or PostgreSQL's (clock_timestamp()), not the node's."""
    if store == "database" and connection.vendor == "sqlite":
        pytest.skip("SQLite is a file on one host: its clock is that host's, shared")
    real_ns = time.time_ns
    decisions = []
    for n in range(LIMIT + 5):
        skew = 3600 * (1 if n % 2 else -1)
        monkeypatch.setattr(time, "time_ns", lambda s=skew: real_ns() + s * 10**9)
        monkeypatch.setattr(time, "time", lambda s=skew: real_ns() / 1e9 + s)
        decisions.append(counters.hit("activate", "skewed", limit=LIMIT, span=SPAN).allowed)
    monkeypatch.undo()
    assert decisions == [True] * LIMIT + [False] * 5


def test_with_redis_a_decision_is_one_round_trip_and_no_query(
    private_redis, settings, monkeypatch, django_assert_num_queries
):
    redis.Redis.from_url(private_redis.url).flushdb()
    _use_redis(settings, private_redis.url)
    counters.hit("activate", "warm", limit=3, span=SPAN)  # loads the script if need be
    sent: list[str] = []
    execute = redis.Redis.execute_command

    def counted(self, *args, **options):
        sent.append(args[0])
        return execute(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", counted)
    with django_assert_num_queries(0):
        decisions = [counters.hit("activate", "ip", limit=3, span=SPAN).allowed for _ in range(4)]
    assert decisions == [True, True, True, False]
    assert sent == ["EVALSHA"] * 4
    assert not RateLog.objects.exists()


def test_redis_failing_mid_traffic_falls_back_to_the_database(settings, tmp_path):
    """Redis stops between two requests: the next is decided in the database (no 500),
    and once Redis is back (empty, as after a crash) the log is Redis's again."""
    server = start_private_redis(tmp_path)
    try:
        _use_redis(settings, server.url)
        assert counters.hit("activate", "ip", limit=2, span=SPAN, now=100).allowed
        server.stop()
        fallback = [counters.hit("activate", "ip", limit=2, span=SPAN, now=101) for _ in range(3)]
        assert [d.allowed for d in fallback] == [True, True, False]
        assert RateLog.objects.get(pk="activate:ip").hits.split() == [str(101 * US)] * 2
        server.start()
        assert counters.hit("activate", "ip", limit=2, span=SPAN, now=102).allowed
        assert RateLog.objects.get(pk="activate:ip").hits.split() == [str(101 * US)] * 2
    finally:
        server.stop()


def test_redis_unreachable_from_the_start_counts_in_the_database(settings):
    _use_redis(settings, "redis://127.0.0.1:1/0")  # nothing listens on port 1
    decisions = [counters.hit("d", "ip", limit=2, span=SPAN, now=70).allowed for _ in range(3)]
    assert decisions == [True, True, False]
    assert RateLog.objects.get(pk="d:ip").hits == f"{70 * US} {70 * US}"


def test_expired_logs_are_purged(monkeypatch):
    counters.hit("t", "old", limit=5, span=SPAN, now=100)
    monkeypatch.setattr(counters, "PURGE_ONE_IN", 1)
    counters.hit("t", "new", limit=5, span=SPAN, now=1000)
    assert list(RateLog.objects.values_list("key", flat=True)) == ["t:new"]


@pytest.mark.django_db(transaction=True)
def test_the_database_store_never_over_admits_concurrent_workers():
    """12 threads (each its own database connection, as workers have) send 96 requests
    at once on the real clock: exactly 20 admitted, and the log holds those 20."""
    start = threading.Barrier(12)

    def worker(_: int) -> list[bool]:
        start.wait()
        try:
            return [
                counters.hit("activate", "busy", limit=LIMIT, span=SPAN).allowed for _ in range(8)
            ]
        finally:
            connection.close()

    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=12) as pool:
        decisions = [d for batch in pool.map(worker, range(12)) for d in batch]
    assert time.monotonic() - began < SPAN, "the requests outlasted the span"
    assert decisions.count(True) == LIMIT
    hits = [int(h) for h in RateLog.objects.get(pk="activate:busy").hits.split()]
    assert len(hits) == LIMIT and hits == sorted(hits)
