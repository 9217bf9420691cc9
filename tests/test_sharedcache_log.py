"""A shared-cache outage is logged once a minute per process, not once per request
(issue 37, item 6: 653 lines a minute per node), and once when it ends. The clock is
injected: the test moves it, nothing sleeps."""

from __future__ import annotations

import logging

import pytest

from config import sharedcache
from ratelimits import counters

DOWN = "shared cache unavailable"
BACK = "shared cache answering again"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    moved = Clock()
    monkeypatch.setattr(sharedcache, "OUTAGE", sharedcache.OutageLog(sharedcache.log, clock=moved))
    return moved


@pytest.fixture
def redis_down(settings):
    """A Redis nobody listens on: every call is refused at once."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }


def _lines(caplog, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


@pytest.mark.django_db
def test_a_thousand_failing_requests_log_one_line_a_minute(clock, redis_down, caplog):
    caplog.set_level(logging.WARNING)
    start = clock.now
    for n in range(1000):
        if n % 10:
            assert sharedcache.get(f"revocations:{n}") is None
        else:  # the activation limit decides in the database
            assert counters.hit("activate", f"10.0.0.{n % 250}", limit=5, span=10).allowed
        clock.now += 0.05  # 50 s in all
    assert _lines(caplog, DOWN) == [
        "shared cache unavailable (rate limit: ConnectionError); deciding rate limits in the "
        "database"
    ]
    clock.now = start + 60  # a minute after the first line
    sharedcache.get("one-more")
    assert _lines(caplog, DOWN)[1:] == [
        "shared cache unavailable (get: ConnectionError); serving without it "
        "(999 more failures since the last line)"
    ]
    assert not _lines(caplog, BACK)


def test_the_end_of_an_outage_is_logged_once(clock, caplog):
    caplog.set_level(logging.WARNING)
    sharedcache.answered()  # no outage: nothing to say
    for _ in range(1000):
        sharedcache.failed("get", ConnectionError())
    clock.now += 75
    sharedcache.answered()
    sharedcache.answered()
    assert len(_lines(caplog, DOWN)) == 1
    assert _lines(caplog, BACK) == ["shared cache answering again after 75 s"]


def test_a_flapping_cache_stays_within_two_lines_a_minute(clock, caplog):
    caplog.set_level(logging.WARNING)
    for _ in range(120):  # down and up again every half second for a minute
        sharedcache.failed("get", ConnectionError())
        clock.now += 0.25
        sharedcache.answered()
        clock.now += 0.25
    assert len(_lines(caplog, DOWN)) == 1 and len(_lines(caplog, BACK)) == 1
    sharedcache.failed("get", ConnectionError())  # a minute on: logged again
    assert len(_lines(caplog, DOWN)) == 2
