"""The device application's routes (``config.device_wsgi``): what cameras call, and
``/metrics`` (the full application's view and access rule: the monitoring network or
the operator key), so the pool that takes the cameras' traffic is scraped too.
Everything else is a JSON 404 naming where it lives."""

from __future__ import annotations

from django.urls import include, path, re_path

from config import views
from console import metrics
from licensing import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("metrics", metrics.MetricsApi.as_view(), name="metrics"),
    path("v1/", include("licensing.device_urls")),
    path("v1/", include("billing.device_urls")),
    # [\\s\\S], not ".": a path holding a newline (%0A) is unknown too.
    re_path(r"^[\s\S]*$", views.device_not_found),
]

handler400 = "config.views.bad_request"
handler500 = "config.views.server_error"
