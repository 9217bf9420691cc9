"""/v1 routes of events (included under /v1/ by config.urls)."""

from __future__ import annotations

from django.urls import path

from config.api import converters  # noqa: F401 - registers <id:...>
from events import api

urlpatterns = [
    path("admin/webhooks", api.WebhooksApi.as_view(), name="admin-webhooks"),
    path("admin/webhooks/<id:webhook_id>", api.WebhookDetailApi.as_view(), name="admin-webhook"),
    path(
        "admin/webhooks/<id:webhook_id>/rotate-secret",
        api.WebhookRotateApi.as_view(),
        name="admin-webhook-rotate",
    ),
    path(
        "admin/webhooks/<id:webhook_id>/enable",
        api.WebhookEnableApi.as_view(),
        name="admin-webhook-enable",
    ),
    path(
        "admin/webhooks/<id:webhook_id>/redeliver",
        api.WebhookRedeliverApi.as_view(),
        name="admin-webhook-redeliver",
    ),
    path("admin/events", api.EventsApi.as_view(), name="admin-events"),
]
