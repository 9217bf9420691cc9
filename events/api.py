"""The /v1 admin endpoints of events (contract §9): webhook endpoints (register, list,
show with recent attempts, delete, rotate the secret, enable, redeliver) and the event
log. One view per operation: parse, call one service or selector, render."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import schema
from config.api.fields import rendered, validated
from events import selectors, serializers, services
from operators.permissions import requires

_WEBHOOK_PATH = schema.id_path("webhook_id", "The webhook endpoint.")
_NOT_FOUND = {**schema.ADMIN_ERRORS, 404: "No such webhook."}


class WebhooksApi(APIView):
    @extend_schema(
        request=serializers.WebhookIn,
        responses={
            201: serializers.WebhookCreatedOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or a url that is not https:// to a "
                    "public address (the detail names the setting that allows it), or an "
                    "unknown event type (the detail lists the types).",
                    404: "No such customer.",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Register a webhook endpoint. It receives the events written from now "
        "on, in order, signed as Standard Webhooks; the secret is shown only here.",
    )
    @requires("manage_webhooks")
    def post(self, request):
        data = validated(serializers.WebhookIn, request.data)
        hook = services.webhook_create(**data)
        return Response(
            rendered(serializers.WebhookCreatedOut, hook), status=status.HTTP_201_CREATED
        )

    @extend_schema(
        operation_id="v1_admin_webhooks_list",
        responses={200: serializers.WebhookListOut, **schema.errors(schema.ADMIN_ERRORS)},
        parameters=[schema.retry_after(429, 503)],
        description="Every webhook endpoint, oldest first (no secrets).",
    )
    @requires("view_service")
    def get(self, request):
        return Response(
            rendered(serializers.WebhookListOut, {"webhooks": selectors.webhooks_list()})
        )


class WebhookDetailApi(APIView):
    @extend_schema(
        parameters=[_WEBHOOK_PATH, schema.retry_after(429, 503)],
        responses={200: serializers.WebhookDetailOut, **schema.errors(_NOT_FOUND)},
        description="One endpoint and its last 20 delivery attempts.",
    )
    @requires("view_service")
    def get(self, request, webhook_id: str):
        hook = services.webhook_get(webhook_id)
        hook.recent_attempts = list(hook.attempts_made.select_related("event")[:20])
        return Response(rendered(serializers.WebhookDetailOut, hook))

    @extend_schema(
        parameters=[_WEBHOOK_PATH, schema.retry_after(429, 503)],
        responses={204: OpenApiResponse(description="Deleted."), **schema.errors(_NOT_FOUND)},
        description="Delete an endpoint (its past attempts stay in the log).",
    )
    @requires("manage_webhooks")
    def delete(self, request, webhook_id: str):
        services.webhook_delete(webhook_id=webhook_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookRotateApi(APIView):
    @extend_schema(
        request=None,
        parameters=[_WEBHOOK_PATH, schema.retry_after(429, 503)],
        responses={200: serializers.WebhookCreatedOut, **schema.errors(_NOT_FOUND)},
        description="A new secret, shown only here. For SVC_WEBHOOK_SECRET_OVERLAP_HOURS "
        "(24 by default) deliveries carry a signature with the old secret too.",
    )
    @requires("manage_webhooks")
    def post(self, request, webhook_id: str):
        hook = services.webhook_rotate_secret(webhook_id=webhook_id)
        return Response(rendered(serializers.WebhookCreatedOut, hook))


class WebhookEnableApi(APIView):
    @extend_schema(
        request=None,
        parameters=[_WEBHOOK_PATH, schema.retry_after(429, 503)],
        responses={200: serializers.WebhookOut, **schema.errors(_NOT_FOUND)},
        description="Enable a disabled endpoint; it resumes at the event it stopped at.",
    )
    @requires("manage_webhooks")
    def post(self, request, webhook_id: str):
        return Response(
            rendered(serializers.WebhookOut, services.webhook_enable(webhook_id=webhook_id))
        )


class WebhookRedeliverApi(APIView):
    @extend_schema(
        request=serializers.RedeliverIn,
        parameters=[_WEBHOOK_PATH, schema.retry_after(429, 503)],
        responses={
            200: serializers.WebhookOut,
            **schema.errors({**schema.BODY_ERRORS, **_NOT_FOUND, 404: "No such webhook or event."}),
        },
        description="Send an event, and every later one the endpoint takes, again.",
    )
    @requires("manage_webhooks")
    def post(self, request, webhook_id: str):
        data = validated(serializers.RedeliverIn, request.data)
        hook = services.webhook_redeliver(webhook_id=webhook_id, event_id=data["event_id"])
        return Response(rendered(serializers.WebhookOut, hook))


class EventsApi(APIView):
    @extend_schema(
        parameters=[serializers.EventQuery, schema.retry_after(429, 503)],
        responses={
            200: serializers.EventPageOut,
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.QUERY_ERRORS[400]} Or a cursor this API did not give.",
                    404: "customer_id names no customer.",
                }
            ),
        },
        description="The event log, newest first; next_cursor pages to older events.",
    )
    @requires("view_service")
    def get(self, request):
        query = validated(serializers.EventQuery, request.query_params.dict())
        page = selectors.events_page(**query)
        answer = {"events": page.events, "next_cursor": page.next_cursor}
        return Response(rendered(serializers.EventPageOut, answer))
