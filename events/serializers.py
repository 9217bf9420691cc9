"""Input and output of the events endpoints; each answer renders through its class here,
which is also its OpenAPI schema."""

from __future__ import annotations

from rest_framework import serializers

from config.api.fields import (
    BodyIn,
    IdField,
    QueryIntegerField,
    StrictCharField,
    UnixField,
    UrlField,
)
from events.models import Event

EVENT_PAGE_MAX = 500


class WebhookIn(BodyIn):
    url = UrlField(
        max_length=2000,
        help_text="https:// to a public address (http:// and private addresses only with "
        "SVC_WEBHOOK_ALLOW_HTTP / SVC_WEBHOOK_ALLOW_PRIVATE).",
    )
    events = serializers.ListField(
        child=serializers.ChoiceField(
            choices=["*", *Event.Type.values],
            error_messages={
                "invalid_choice": "unknown event type {input!r}; the types are: "
                + ", ".join(sorted(Event.Type.values))
                + ', or "*" for every one'
            },
        ),
        min_length=1,
        max_length=len(Event.Type.values) + 1,
        help_text='Event types to receive, or ["*"] for every type.',
    )
    customer_id = IdField(
        required=False, help_text="Only this customer's events; absent: every customer's."
    )


class WebhookOut(serializers.Serializer):
    webhook_id = serializers.CharField(source="id")
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    customer_id = serializers.CharField(allow_null=True)
    enabled = serializers.BooleanField()
    disabled_reason = serializers.CharField(allow_blank=True)
    created_at = UnixField(help_text="Unix seconds.")
    failing_since = UnixField(
        help_text="Unix seconds the event at the head first failed; 0: not failing."
    )
    attempts = serializers.IntegerField(help_text="Failed attempts of the event at the head.")


class WebhookCreatedOut(WebhookOut):
    secret = serializers.CharField(
        help_text="whsec_...: verifies the webhook-signature header. Shown only here."
    )


class WebhookListOut(serializers.Serializer):
    webhooks = WebhookOut(many=True)


class RedeliverIn(BodyIn):
    event_id = StrictCharField(
        max_length=40, help_text="Send this event and every later one again."
    )


class EventOut(serializers.Serializer):
    id = serializers.CharField(source="event_id", help_text="The webhook-id of its deliveries.")
    type = serializers.ChoiceField(choices=Event.Type.choices)
    customer_id = serializers.CharField(allow_blank=True)
    created_at = UnixField(help_text="Unix seconds.")
    data = serializers.DictField(help_text="The ids a receiver needs to act (contract §9).")


class EventQuery(serializers.Serializer):
    type = serializers.ChoiceField(choices=Event.Type.choices, required=False)
    customer_id = IdField(required=False, help_text="Only this customer's (404 if unknown).")
    cursor = serializers.RegexField(
        r"^[0-9]{1,19}$",
        required=False,
        error_messages={"invalid": "cursor must be a next_cursor this API gave"},
        help_text="next_cursor of the page before.",
    )
    limit = QueryIntegerField(required=False, default=100, min_value=1, max_value=EVENT_PAGE_MAX)


class EventPageOut(serializers.Serializer):
    events = EventOut(many=True, help_text="Newest first.")
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Pass as cursor for older events; null: none older."
    )


class AttemptOut(serializers.Serializer):
    event_id = serializers.CharField(source="event.event_id")
    attempt = serializers.IntegerField()
    at = UnixField(help_text="Unix seconds.")
    ok = serializers.BooleanField()
    status_code = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField()
    response_excerpt = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_blank=True)


class WebhookDetailOut(WebhookOut):
    recent_attempts = AttemptOut(many=True, help_text="The last 20, newest first.")
