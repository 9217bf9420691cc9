"""The activation limit (ratelimits.counters): a sliding window, shared by every worker
and node: through Redis when the cache is Redis, else through the database."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from ratelimits import counters
from ratelimits.models import RateCounter
from tests.conftest import start_gunicorn, stop_gunicorn

pytestmark = pytest.mark.django_db


def test_the_window_slides_no_double_burst_across_a_boundary():
    # A fixed window would admit 20 at the end of one window and 20 more at the start of
    # the next: 40 in a fraction of a second.
    late = [counters.hit("t", "ip1", limit=20, span=10, now=9.9).allowed for _ in range(20)]
    assert all(late)
    early = [counters.hit("t", "ip1", limit=20, span=10, now=10.1).allowed for _ in range(20)]
    assert not any(early)
    refused = counters.hit("t", "ip1", limit=20, span=10, now=10.2)
    assert refused.retry_after == 10  # until the window moves on (rounded up)
    # Refused requests count too: a client that keeps hammering stays refused. Once it
    # waits, the busy window slides out of view and it is admitted again.
    assert not counters.hit("t", "ip1", limit=20, span=10, now=19.9).allowed
    assert counters.hit("t", "ip1", limit=20, span=10, now=25).allowed


def test_clients_have_their_own_budget():
    assert all(counters.hit("t", "a", limit=2, span=10, now=5).allowed for _ in range(2))
    assert not counters.hit("t", "a", limit=2, span=10, now=5).allowed
    assert counters.hit("t", "b", limit=2, span=10, now=5).allowed


def test_expired_counters_are_purged(monkeypatch):
    counters.hit("t", "old", limit=5, span=10, now=100)
    monkeypatch.setattr(counters, "PURGE_ONE_IN", 1)
    counters.hit("t", "new", limit=5, span=10, now=1000)
    assert list(RateCounter.objects.values_list("key", flat=True)) == ["t:new:100"]


@pytest.fixture(scope="module")
def redis_url():
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    server.terminate()
    server.wait(timeout=10)


def test_with_redis_the_count_costs_no_query(redis_url, settings, django_assert_num_queries):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url}
    }
    with django_assert_num_queries(0):
        decisions = [counters.hit("r", "ip", limit=3, span=10, now=50).allowed for _ in range(4)]
    assert decisions == [True, True, True, False]
    assert not RateCounter.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_limit_holds_across_the_workers_of_one_server(tmp_path, make_batch):
    """3 gunicorn workers x 4 threads, no Redis: 60 activations from one address inside
    a few seconds, at most 20 admitted."""
    batch = make_batch(units=100)
    service = start_gunicorn(tmp_path, SVC_ACTIVATION_ALLOWLIST="", SVC_ACTIVATION_RATE="20/10s")

    def activate(n: int) -> int:
        body = json.dumps({"batch_token": batch.license.token, "device_id": f"cam-{n}"})
        request = urllib.request.Request(
            f"{service.url}/v1/activate",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as error:
            if error.code == 429:
                assert int(error.headers["Retry-After"]) >= 1
                assert "20 requests per 10 s" in json.load(error)["detail"]
            return error.code

    try:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=12) as pool:
            statuses = list(pool.map(activate, range(60)))
        elapsed = time.monotonic() - started
    finally:
        stop_gunicorn(service)
    assert elapsed < 9, f"the burst took {elapsed:.1f} s: the window moved on"
    assert statuses.count(200) <= 20 and statuses.count(200) >= 15
    assert statuses.count(429) == 60 - statuses.count(200)


def test_with_redis_down_the_database_counts_meanwhile(settings):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]  # nothing listens here once the socket closes
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{closed}/0",
        }
    }
    decisions = [counters.hit("d", "ip", limit=2, span=10, now=70).allowed for _ in range(3)]
    assert decisions == [True, True, False]
    assert RateCounter.objects.get(pk="d:ip:7").count == 3
