"""The activation limit through real HTTP (licensing.throttling over ratelimits.counters,
whose algorithm tests/ratelimits/test_counters.py pins with an injected clock): never more
than 20 activations from one address in any 10 s, shared by every worker and node,
through Redis when the cache is Redis, else through the database."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import redis

from config import clock
from licensing.models import Activation
from svccore.rates import parse_rate
from tests.conftest import start_gunicorn, stop_gunicorn

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

LIMIT, SPAN = 20, 10


def test_rates_below_one_are_refused():
    assert parse_rate("20/10s") == (20, 10) and parse_rate("5/min") == (5, 60)
    for rate in ("0/10s", "20/0s", "20 per 10s"):
        with pytest.raises(ValueError, match="SVC_ACTIVATION_RATE"):
            parse_rate(rate)


def _activation(url: str, token: str, device_id: str, *, forwarded_for: str | None = None):
    """POST /v1/activate: (status, Retry-After or None, detail or None)."""
    headers = {"Content-Type": "application/json"}
    if forwarded_for:
        headers["X-Forwarded-For"] = forwarded_for
    body = json.dumps({"batch_token": token, "device_id": device_id}).encode()
    request = urllib.request.Request(f"{url}/v1/activate", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, None, None
    except urllib.error.HTTPError as error:
        retry_after = error.headers.get("Retry-After")
        detail = json.load(error).get("detail")
        return error.code, None if retry_after is None else int(retry_after), detail


def test_the_limit_holds_across_the_workers_of_one_server(tmp_path, make_batch, server_clock):
    """3 gunicorn workers x 4 threads, no Redis (the database's log): 60 activations from
    one address at one instant of the server's clock (stopped: however long a busy
    machine takes to send them), exactly 20 admitted."""
    token = make_batch(units=100).license.token
    clock.stop_at(server_clock.path, dt.datetime.now(tz=dt.UTC))  # for the whole test
    service = start_gunicorn(
        tmp_path,
        SVC_ACTIVATION_ALLOWLIST="",
        SVC_ACTIVATION_RATE="20/10s",
        SVC_TEST_CLOCK_FILE=str(server_clock.path),
    )
    try:
        with ThreadPoolExecutor(max_workers=12) as pool:
            answers = list(
                pool.map(lambda n: _activation(service.url, token, f"cam-{n}"), range(60))
            )
    finally:
        stop_gunicorn(service)
    statuses = Counter(status for status, _, _ in answers)
    assert statuses == {200: LIMIT, 429: 60 - LIMIT}
    for status, retry_after, detail in answers:
        if status == 429:
            # The clock stands still: the first admitted leaves the span 10 s from now,
            # and a request is admitted strictly after that.
            assert retry_after == SPAN + 1
            assert "20 requests per 10 s" in detail


# --- two nodes, one Redis: the pattern ----------------------------------------


@dataclass
class Sent:
    n: int
    node: int
    at: float  # the server's clock (stopped) when the request was sent and decided
    status: int
    retry_after: int | None


def _most_in_a_span(instants: list[float]) -> int:
    """The most instants in any closed span of SPAN seconds (one starts at an instant)."""
    return max((sum(1 for u in instants if t <= u <= t + SPAN) for t in instants), default=0)


def _expected(schedule: list[float]) -> list[tuple[int, int | None]]:
    """What an exact limit answers to requests at ``schedule`` (ascending instants), one
    at a time: admitted when fewer than LIMIT admitted instants lie in the closed span
    ending at it; else refused, with Retry-After the whole seconds strictly past the
    moment the deciding instant leaves the span (it still counts at exactly SPAN old).
    In microseconds, as the log keeps them."""
    admitted: list[int] = []
    answers: list[tuple[int, int | None]] = []
    for at in (round(moment * 1_000_000) for moment in schedule):
        inside = [t for t in admitted if t >= at - SPAN * 1_000_000]
        if len(inside) < LIMIT:
            admitted.append(at)
            answers.append((200, None))
        else:
            wait = inside[len(inside) - LIMIT] + SPAN * 1_000_000 - at
            answers.append((429, wait // 1_000_000 + 1))
    return answers


def test_two_nodes_sharing_redis_admit_at_most_20_in_every_10_s_span(
    tmp_path, make_batch, private_redis, server_clock
):
    """Issue 22's finding, replayed through real HTTP: two gunicorn nodes (3 workers x 4
    threads each) sharing one Redis, requests alternating between them from one address
    (nginx's X-Forwarded-For). 20 activations in the last 0.7 s of a 10 s window, then
    one every 0.5 s for 12 s. The weighted window admitted 38 inside one 10 s span; the
    log admits the burst, refuses until its first request is 10 s old, then admits.

    The instants are the server's clock, stopped at each request's moment in turn (a
    test clock decides the limit, ``licensing.throttling``): the 22 s of the pattern
    take as long as 44 requests take, and every answer is known in advance."""
    token = make_batch(units=100).license.token
    address = "198.51.100.22"
    window_end = float((int(time.time()) // SPAN + 1) * SPAN)
    schedule = [window_end - 0.7 + k * 0.7 / LIMIT for k in range(LIMIT)]
    schedule += [window_end + 0.5 * j for j in range(1, 25)]
    clock.stop_at(server_clock.path, dt.datetime.fromtimestamp(schedule[0], tz=dt.UTC))
    environment = {
        "CACHE_URL": private_redis.url,
        "SVC_TRUSTED_PROXIES": "127.0.0.1/32",
        "SVC_ACTIVATION_ALLOWLIST": "",
        "SVC_ACTIVATION_RATE": f"{LIMIT}/{SPAN}s",
        "SVC_TEST_CLOCK_FILE": str(server_clock.path),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        starting = [pool.submit(start_gunicorn, tmp_path, **environment) for _ in range(2)]
        nodes = [future.result() for future in starting]
    store = redis.Redis.from_url(private_redis.url)
    answers: list[Sent] = []
    try:
        for n, at in enumerate(schedule):
            clock.stop_at(server_clock.path, dt.datetime.fromtimestamp(at, tz=dt.UTC))
            node = n % 2
            status, retry_after, _ = _activation(
                nodes[node].url, token, f"pattern-{n}", forwarded_for=address
            )
            answers.append(Sent(n, node, at, status, retry_after))
        logged = {}
        for key in store.scan_iter(match=f"*ratelimit:activate:{address}"):
            logged.update(store.zrange(key, 0, -1, withscores=True))
    finally:
        for node in nodes:
            stop_gunicorn(node)

    statuses = Counter(a.status for a in answers)
    print(
        f"\ntwo nodes, one Redis: {dict(statuses)}; then 200 '.' and 429 'x': "
        + "".join("." if a.status == 200 else "x" for a in answers[LIMIT:])
    )
    assert [(a.status, a.retry_after) for a in answers] == _expected(schedule)
    assert statuses[200] > LIMIT  # admitted again once the burst's first left the span
    # The log holds the admitted instants of the last span, on the server's clock.
    admitted = [a.at for a in answers if a.status == 200]
    instants = sorted(score / 1e6 for score in logged.values())
    assert instants == pytest.approx([t for t in admitted if t >= schedule[-1] - SPAN])
    assert _most_in_a_span(admitted) == LIMIT  # the burst filled the span, no more
    # Both nodes admitted some; every 200 is an activation on file from that address.
    assert {a.node for a in answers if a.status == 200} == {0, 1}
    assert Activation.objects.filter(client_ip=address).count() == statuses[200]


@pytest.mark.django_db
def test_a_refused_activation_says_its_wait_once(device_api, make_batch, settings):
    """One sentence, the same number as Retry-After (DRF would append "Expected
    available in N seconds." to it)."""
    settings.SVC_ACTIVATION_ALLOWLIST = []
    settings.SVC_ACTIVATION_RATE = "1/10s"
    batch = make_batch(units=5)
    body = {"batch_token": batch.license.token, "device_id": "cam-once-1"}
    assert device_api.post("/v1/activate", body, format="json").status_code == 200
    refused = device_api.post("/v1/activate", body | {"device_id": "cam-once-2"}, format="json")
    assert refused.status_code == 429
    wait = int(refused["Retry-After"])
    assert 1 <= wait <= 10
    assert refused.json() == {
        "detail": f"activation rate limit exceeded: 1 requests per 10 s per IP; retry in {wait} s"
    }
