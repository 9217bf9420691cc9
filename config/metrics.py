"""The service's Prometheus metrics (``GET /metrics``, served by ``console.metrics``).

Counters and histograms live here and are bumped where things happen. Under gunicorn
each worker is a process: with ``SVC_METRICS_DIR`` set (deploy/gunicorn.conf.py and
``make run`` set it), prometheus-client's multiprocess mode keeps each worker's values
in that directory and ``/metrics`` adds them up. Without it (tests, one process) the
values live in this process.

Facts of the whole cluster (the revocation list's sequence number, the webhook backlog
and deliveries) are read from the database at scrape time by ``console.metrics``: every
node reports the same value, so aggregate them with ``max()``."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from prometheus_client import Counter, Histogram

ACTIVATIONS = Counter(
    "svc_activations_total",
    "Activation requests by result: new (a seat taken), reactivated, refused (by the "
    "service: an exhausted batch, a bad or revoked key), throttled (429: the node's "
    "activation rate limit).",
    ["result"],
)
USAGE_RECORDS = Counter(
    "svc_usage_records_total",
    "Usage records uploaded, by result: accepted, duplicate, conflict, refused, deferred.",
    ["result"],
)
REVOCATIONS = Counter("svc_revocations_total", "Licences revoked (committed).")
SIGNING_SECONDS = Histogram(
    "svc_signing_seconds",
    "Time to sign one token or document, by signer (file, pkcs11).",
    ["signer"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 3),
)
RESPONSES = Counter(
    "svc_http_responses_total",
    "HTTP answers by status class (2xx, 3xx, 4xx, 5xx).",
    ["status_class"],
)

REPLICA_READS = Counter(
    "svc_replica_reads_total",
    "Requests eligible for the read replica (SVC_DATABASE_REPLICA_URL) by the database "
    "that answered them: replica or primary.",
    ["database"],
)
REPLICA_FALLBACKS = Counter(
    "svc_replica_fallbacks_total",
    "Eligible requests answered from the primary, by reason: lag (beyond "
    "SVC_REPLICA_MAX_LAG_SECONDS), down (the replica failed a moment ago), failed (it "
    "failed under this request, done again on the primary), wrote (the request wrote), "
    "answer (an error or a change the replica may not hold yet, done again on the primary).",
    ["reason"],
)

_CLASSES = {n: f"{n}xx" for n in range(1, 6)}


class ResponseCountMiddleware:
    """Counts every answer by its status class (the 5xx-rate alert reads it)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self._children = {label: RESPONSES.labels(label) for label in _CLASSES.values()}

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        label = _CLASSES.get(response.status_code // 100)
        if label is not None:
            self._children[label].inc()
        return response


class timed_signing:  # noqa: N801 - used as a context manager, like a function
    """``with timed_signing(signer_kind):`` observes the block's time."""

    __slots__ = ("_child", "_started")

    def __init__(self, signer: str) -> None:
        self._child = SIGNING_SECONDS.labels(signer)

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self._child.observe(time.perf_counter() - self._started)
