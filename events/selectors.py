"""Reads of the event log and the webhook endpoints."""

from __future__ import annotations

from dataclasses import dataclass

from config.api.paging import id_page
from customers.selectors import customer_check
from events.models import Event, Webhook


@dataclass(frozen=True)
class EventPage:
    events: list[Event]
    next_cursor: str | None


def events_page(
    *, type: str | None = None, customer_id: str | None = None, cursor: str | None = None,
    limit: int = 100,
) -> EventPage:  # fmt: skip
    """Events newest first, ``limit`` at most; ``next_cursor`` continues with the older
    ones (the position of the page's last event: none skipped, none repeated, whatever
    is written meanwhile). An unknown customer is 404."""
    customer_check(customer_id)
    events = Event.objects.order_by("-id")
    if type:
        events = events.filter(type=type)
    if customer_id:
        events = events.filter(customer_id=customer_id)
    return EventPage(*id_page(events, cursor=cursor, limit=limit))


def webhooks_list() -> list[Webhook]:
    return list(Webhook.objects.order_by("created_at", "id"))
