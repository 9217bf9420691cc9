"""Every write of the events app: an event into the log (called inside the transaction of
the change it reports, so a rollback takes the event with it), and the webhook
endpoints' registration, removal and secret rotation."""

from __future__ import annotations

import base64
import datetime as dt
import secrets
from typing import Any

from django.conf import settings
from django.db import transaction

from audit.services import audited
from config import clock
from config.errors import InvalidInput, NotFound
from config.rows import insert_row
from customers.models import Customer
from events import log as event_log
from events import urlcheck
from events.models import Event, Webhook
from svccore.ids import random_id

EVENT_TYPES = frozenset(Event.Type.values)
SECRET_PREFIX = "whsec_"  # noqa: S105 - the prefix, not a secret


def event_row(
    type: str, *, customer_id: str = "", data: dict[str, Any], once_key: str | None = None
) -> tuple[type[Event], dict[str, Any]]:
    """An event as a row for ``config.rows.insert_rows``, for a hot path that writes it
    in the same statement as the change it reports (a new activation)."""
    assert type in EVENT_TYPES, type
    return Event, {
        "event_id": f"evt_{random_id(24)}",
        "type": type,
        "customer_id": customer_id or "",
        "data": data,
        "created_at": clock.now(),
        "once_key": once_key,
    }


def event_emit(
    type: str, *, customer_id: str = "", data: dict[str, Any], once_key: str | None = None
) -> None:
    """Write one event, inside the caller's transaction. ``once_key`` names an event
    that happens once (a threshold crossed, a reminder sent): a second write with the
    same key, from any node, writes nothing."""
    model, values = event_row(type, customer_id=customer_id, data=data, once_key=once_key)
    if once_key is None:
        insert_row(model, **values)
        return
    model.objects.bulk_create([model(**values)], ignore_conflicts=True)


def _secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _types(events: Any) -> list[str]:
    if not isinstance(events, list) or not events or len(events) > len(EVENT_TYPES) + 1:
        raise InvalidInput('events must be a non-empty list of event types, or ["*"]')
    unknown = [name for name in events if name != "*" and name not in EVENT_TYPES]
    if unknown:
        raise InvalidInput(
            f"unknown event type {str(unknown[0])[:64]!r}; the types are: "
            + ", ".join(sorted(EVENT_TYPES))
            + ', or "*" for every one'
        )
    return ["*"] if "*" in events else sorted(set(events))


def _hook_target(result: Webhook | None, arguments: dict[str, Any]) -> str:
    return result.pk if result is not None else arguments.get("webhook_id", "")


@audited("webhook.create", target=_hook_target)
def webhook_create(*, url: str, events: Any, customer_id: str | None = None) -> Webhook:
    """Register an endpoint; its ``secret`` (whsec_...) is on the returned object only."""
    urlcheck.check(url)
    types = _types(events)
    if customer_id is not None:
        if not Customer.objects.filter(pk=customer_id).exists():
            raise NotFound(f"no customer {customer_id}")
    now = clock.now()
    # A new endpoint starts at the log's end: it hears what happens from now on.
    head_xid, head = event_log.end()
    return Webhook.objects.create(
        id=f"wh_{random_id(20)}",
        url=url,
        events=types,
        customer_id=customer_id,
        secret=_secret(),
        created_at=now,
        position_xid=head_xid,
        position=head,
        next_attempt_at=now,
    )


def webhook_get(webhook_id: str) -> Webhook:
    try:
        return Webhook.objects.get(pk=webhook_id)
    except Webhook.DoesNotExist:
        raise NotFound(f"no webhook {webhook_id}") from None


@audited("webhook.delete", target=_hook_target)
@transaction.atomic
def webhook_delete(*, webhook_id: str) -> None:
    """Delete an endpoint; its attempts stay in the log (without it).

    The row is locked first, as the worker locks it to record an attempt: an attempt
    recorded before is unlinked with the others, one recorded after is written without
    the endpoint, and none can land between the unlinking and the delete (which failed
    the delete on its foreign key)."""
    hook = Webhook.objects.select_for_update().filter(pk=webhook_id).first()
    if hook is None:
        raise NotFound(f"no webhook {webhook_id}")
    hook.delete()


@audited("webhook.rotate_secret", target=_hook_target)
def webhook_rotate_secret(*, webhook_id: str) -> Webhook:
    """A new secret; deliveries are signed with the old one too for
    SVC_WEBHOOK_SECRET_OVERLAP_HOURS, while receivers move to the new one."""
    with transaction.atomic():
        hook = Webhook.objects.select_for_update().filter(pk=webhook_id).first()
        if hook is None:
            raise NotFound(f"no webhook {webhook_id}")
        hook.previous_secret = hook.secret
        hook.previous_secret_until = clock.now() + dt.timedelta(
            hours=settings.SVC_WEBHOOK_SECRET_OVERLAP_HOURS
        )
        hook.secret = _secret()
        hook.save(update_fields=["secret", "previous_secret", "previous_secret_until"])
    return hook


@audited("webhook.enable", target=_hook_target)
def webhook_enable(*, webhook_id: str) -> Webhook:
    """Enable a disabled endpoint again; it resumes at the event it stopped at."""
    hook = webhook_get(webhook_id)
    hook.enabled = True
    hook.disabled_reason = ""
    hook.attempts = 0
    hook.failing_since = None
    hook.next_attempt_at = clock.now()
    hook.save(
        update_fields=["enabled", "disabled_reason", "attempts", "failing_since", "next_attempt_at"]
    )
    return hook


@audited("webhook.redeliver", target=_hook_target)
def webhook_redeliver(*, webhook_id: str, event_id: str) -> Webhook:
    """Send ``event`` and every later one again: the endpoint's position moves back to
    just before it (at least once, in order)."""
    hook = webhook_get(webhook_id)
    event = Event.objects.filter(event_id=event_id).first()
    if event is None:
        raise NotFound(f"no event {event_id}")
    position_xid, position = min((hook.position_xid, hook.position), event_log.before(event))
    Webhook.objects.filter(pk=hook.pk).update(
        position_xid=position_xid, position=position, next_attempt_at=clock.now()
    )
    hook.refresh_from_db()
    return hook
