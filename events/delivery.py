"""The webhook worker's work (``manage.py deliver_events``): claim an endpoint that is
due, send it the next event it has not acknowledged, record the attempt, and move on or
back off.

- **In order per endpoint, at least once.** An endpoint has one position in the event
  log; it moves past an event only on a 2xx. A failed event is retried before any later
  one is sent. No event that commits late falls behind a position (:mod:`events.log`).
- **Never twice at once.** A worker claims an endpoint with one conditional UPDATE that
  sets a lease (``lease_until``); another worker, on this node or another, sees it taken
  until the lease ends. A worker killed mid-delivery leaves a lease that ends, and the
  next worker sends that event again: nothing lost, at worst sent twice, which the
  Standard Webhooks ``webhook-id`` lets a receiver see.
- **Back-off with jitter**, 5 s doubling to an hour, for SVC_WEBHOOK_RETRY_HOURS (72 by
  default); then the endpoint is disabled and a ``webhook.disabled`` event written.
- **Signed** by the ``standardwebhooks`` package, with the previous secret too while a
  rotation overlaps; bounded bodies; an attempt, whole, lasts at most SVC_WEBHOOK_TIMEOUT,
  and a worker sends to several endpoints at once (``deliver_events --concurrency``), so
  a slow endpoint delays no other.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import logging
import random
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from standardwebhooks.webhooks import Webhook as Signer

from config import clock
from config.errors import InvalidInput
from events import log as event_log
from events import urlcheck
from events.models import DeliveryAttempt, Event, Webhook
from events.services import event_emit
from svccore.ids import random_id

log = logging.getLogger(__name__)

IDLE = dt.timedelta(seconds=1)  # an endpoint with nothing to send looks again after this
BACKOFF_FIRST = 5.0
BACKOFF_MAX = 3600.0
EXCERPT = 500
RESPONSE_READ = 4096
USER_AGENT = "svc-licensing-webhooks/1"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status_code: int | None
    latency_ms: int
    excerpt: str
    error: str


def backoff_seconds(attempts: int) -> float:
    """Seconds before attempt ``attempts + 1``: 5, 10, 20 ... capped at an hour, each
    times a random 0.75..1.25 so that endpoints failing together spread out."""
    base = min(BACKOFF_FIRST * 2 ** max(0, attempts - 1), BACKOFF_MAX)
    return base * random.uniform(0.75, 1.25)


def payload(event: Event) -> str:
    """The delivered body (contract §9): ``{id, type, created_at, data}``."""
    body = {
        "id": event.event_id,
        "type": event.type,
        "created_at": int(event.created_at.timestamp()),
        "data": event.data,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def signature(hook: Webhook, event_id: str, moment: dt.datetime, body: str) -> str:
    """``webhook-signature``: v1 with the secret, and with the previous one while a
    rotation overlaps (space-separated, as the specification allows)."""
    secrets_now = [hook.secret]
    if hook.previous_secret and hook.previous_secret_until and moment < hook.previous_secret_until:
        secrets_now.append(hook.previous_secret)
    return " ".join(
        Signer(secret).sign(msg_id=event_id, timestamp=moment, data=body) for secret in secrets_now
    )


class _Cuttable:
    """The socket of a connection, kept from the moment it exists (before a TLS
    handshake too), so that the attempt's deadline can cut it from another thread."""

    raw: socket.socket | None = None
    was_cut = False

    def cut(self) -> None:
        self.was_cut = True  # before the cut: the thread it wakes reads this
        raw = self.raw
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)  # wakes a blocked read or write at once


class _HTTPConnection(_Cuttable, http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        self.raw = self.sock


class _PinnedHTTPSConnection(_Cuttable, http.client.HTTPSConnection):
    """HTTPS to an address already checked, with the certificate checked for the host."""

    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.raw = sock
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def send(hook: Webhook, event: Event) -> Outcome:
    """One attempt: POST the event to the endpoint. Never raises.

    The whole attempt (connect, TLS, sending, the status line, headers and the start of
    the body) ends within SVC_WEBHOOK_TIMEOUT of its start: a socket time-out bounds
    each read only, and a receiver trickling a byte at a time would hold the worker for
    ever, so a timer cuts the connection at the deadline."""
    started = time.monotonic()
    timeout = settings.SVC_WEBHOOK_TIMEOUT

    def outcome(ok: bool, status: int | None, excerpt: str = "", error: str = "") -> Outcome:
        latency = int((time.monotonic() - started) * 1000)
        return Outcome(ok, status, latency, excerpt[:EXCERPT], error[:EXCERPT])

    try:
        host, port, address = urlcheck.check(hook.url)
    except InvalidInput as refused:
        return outcome(False, None, error=str(refused))
    left = started + timeout - time.monotonic()
    if left <= 0:
        return outcome(False, None, error=f"name resolution took over {timeout:g} s")
    parts = urlsplit(hook.url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    moment = clock.now()
    body = payload(event)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Host": parts.netloc.rsplit("@", 1)[-1],
        "webhook-id": event.event_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": signature(hook, event.event_id, moment, body),
    }
    if parts.scheme == "https":
        connection: _Cuttable = _PinnedHTTPSConnection(host, address, port, left)
    else:
        connection = _HTTPConnection(address, port, timeout=left)
    deadline = threading.Timer(left, connection.cut)
    deadline.daemon = True
    deadline.start()
    try:
        connection.request("POST", path, body=body.encode(), headers=headers)
        response = connection.getresponse()
        excerpt = response.read(RESPONSE_READ).decode("utf-8", "replace")
        if connection.was_cut:  # cut while the body was read: a short excerpt
            raise TimeoutError
        return outcome(200 <= response.status < 300, response.status, excerpt)
    except (OSError, http.client.HTTPException, ssl.SSLError) as failure:
        if connection.was_cut or isinstance(failure, TimeoutError):
            return outcome(False, None, error=f"no complete answer within {timeout:g} s")
        return outcome(False, None, error=f"{type(failure).__name__}: {failure}")
    finally:
        deadline.cancel()
        connection.close()


def lease() -> dt.timedelta:
    """How long a claimed endpoint stays this worker's: twice the attempt's time-out and
    5 s more, so a live worker always finishes first, and a dead one's endpoint is
    taken over soon after."""
    return dt.timedelta(seconds=2 * settings.SVC_WEBHOOK_TIMEOUT + 5)


def _claim(now: dt.datetime) -> Webhook | None:
    """An endpoint that is due and not leased, leased to this worker; None when none."""
    free = Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    for candidate in (
        Webhook.objects.filter(free, enabled=True, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:16]
    ):
        until = now + lease()
        taken = Webhook.objects.filter(free, pk=candidate, enabled=True).update(lease_until=until)
        hook = Webhook.objects.filter(pk=candidate).first() if taken else None
        if hook is not None:  # None: deleted since it was leased
            return hook
    return None


def next_event(hook: Webhook) -> Event | None:
    events = event_log.unread((hook.position_xid, hook.position))
    if hook.events != ["*"]:
        events = events.filter(type__in=hook.events)
    if hook.customer_id:
        events = events.filter(customer_id=hook.customer_id)
    return events.first()


def _release(hook: Webhook, **changes) -> None:
    # Only while the lease is still this worker's: a worker that outlived its lease
    # (a stop of the world) leaves the endpoint to the one that took it over.
    Webhook.objects.filter(pk=hook.pk, lease_until=hook.lease_until).update(
        lease_until=None, **changes
    )


# deliver_one's answer when the endpoint it claimed had nothing to send.
NOTHING_TO_SEND = Outcome(ok=True, status_code=None, latency_ms=0, excerpt="", error="")


def deliver_one(now: dt.datetime | None = None) -> Outcome | None:
    """Claim one due endpoint and send it its next event. Returns the attempt's outcome,
    NOTHING_TO_SEND when the endpoint claimed had no event waiting, or None when no
    endpoint was due."""
    now = now or clock.now()
    hook = _claim(now)
    if hook is None:
        return None
    event = next_event(hook)
    if event is None:
        _release(hook, next_attempt_at=now + IDLE)
        return NOTHING_TO_SEND
    result = send(hook, event)
    done = clock.now()
    attempt = hook.attempts + 1
    with transaction.atomic():
        # The endpoint's row locked, as webhook_delete locks it: deleted while this
        # attempt was in flight, the attempt is kept without it, as the delete keeps
        # the others, and there is nothing left to release.
        kept = Webhook.objects.select_for_update().filter(pk=hook.pk).values_list("pk").first()
        DeliveryAttempt.objects.create(
            webhook=hook if kept else None,
            event=event,
            attempt=attempt,
            at=done,
            ok=result.ok,
            status_code=result.status_code,
            latency_ms=result.latency_ms,
            response_excerpt=result.excerpt,
            error=result.error,
        )
        if not kept:
            return result
        if result.ok:
            _release(
                hook, position_xid=event.xid, position=event.id, attempts=0,
                failing_since=None, next_attempt_at=done,
            )  # fmt: skip
            return result
        failing_since = hook.failing_since or done
        window = dt.timedelta(hours=settings.SVC_WEBHOOK_RETRY_HOURS)
        if done - failing_since >= window:
            reason = (
                f"disabled after {attempt} failed attempts over "
                f"{settings.SVC_WEBHOOK_RETRY_HOURS:g} h at event {event.event_id}: "
                f"{result.error or f'HTTP {result.status_code}'}"
            )[:500]
            _release(
                hook, enabled=False, disabled_reason=reason, attempts=attempt,
                failing_since=failing_since,
            )  # fmt: skip
            event_emit(
                Event.Type.WEBHOOK_DISABLED,
                customer_id=hook.customer_id or "",
                data={"webhook_id": hook.pk, "url": hook.url, "reason": reason},
            )
            log.warning("webhook %s disabled: %s", hook.pk, reason)
            return result
        _release(
            hook,
            attempts=attempt,
            failing_since=failing_since,
            next_attempt_at=done + dt.timedelta(seconds=backoff_seconds(attempt)),
        )
    return result


def backlog() -> int:
    """Events enabled endpoints have still to receive (an upper bound: type and customer
    filters are not applied)."""
    positions = Webhook.objects.filter(enabled=True).values_list("position_xid", "position")
    return sum(Event.objects.filter(event_log.past(position)).count() for position in positions)


TEST_EVENT_TYPE = "webhook.test"


def webhook_test_send(hook: Webhook) -> tuple[Event, Outcome]:
    """Send ``hook`` a test event now, as the worker sends every event (the same URL
    check, Standard Webhooks signature, headers and deadline: :func:`send`), and answer
    what happened. The event is not written to the log and moves no position: a
    receiver sees its ``type`` ``webhook.test``; a test is never retried."""
    event = Event(
        event_id=f"evt_test_{random_id(20)}",
        type=TEST_EVENT_TYPE,
        customer_id=hook.customer_id or "",
        data={
            "webhook_id": hook.pk,
            "message": "A test event sent from the licensing service: nothing happened.",
        },
        created_at=clock.now(),
    )
    return event, send(hook, event)
