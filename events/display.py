"""How the console and the portal tell a person what a test delivery did."""

from __future__ import annotations

from django.contrib import messages

from events.delivery import Outcome
from events.models import Event, Webhook


def test_result(hook: Webhook, event: Event, outcome: Outcome) -> tuple[int, str]:
    """(message level, text) of a test event's one attempt, as it happened: the status
    the endpoint answered and how long it took, or why nothing was delivered."""
    sent = f"Test event {event.event_id} to {hook.url}"
    took = f"in {outcome.latency_ms:,} ms"
    if outcome.ok:
        return messages.SUCCESS, f"{sent}: delivered, HTTP {outcome.status_code} {took}."
    if outcome.status_code is not None:
        answer = outcome.excerpt.strip()[:200]
        return messages.ERROR, (
            f"{sent}: not accepted, HTTP {outcome.status_code} {took} (a receiver must "
            f"answer 2xx){f': {answer}' if answer else ''}. Not retried."
        )
    return messages.ERROR, f"{sent}: not delivered {took}: {outcome.error}. Not retried."
