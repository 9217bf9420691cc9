"""The /v1 route cameras upload usage to (under /v1/): in the full application
(``billing.urls``) and in the device application (``config.device_urls``)."""

from __future__ import annotations

from django.urls import path

from billing import api

urlpatterns = [
    path("usage", api.UsageUploadApi.as_view(), name="usage"),
]
