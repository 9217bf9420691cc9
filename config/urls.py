from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.urls import include, path, re_path

from config import views
from config.admin.base import guard_every_admin
from config.api import converters  # noqa: F401 - registers <id:...>
from console import credit_notes as console_credit_notes
from console import metrics, second_factor
from console import payments as console_payments
from console import views as console_views
from licensing import health

# Every admin is registered by now (the admin app's ready() autodiscovers them).
guard_every_admin(admin.site)

urlpatterns = [
    path("", views.index, name="index"),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", metrics.MetricsApi.as_view(), name="metrics"),
    # Each app's /v1 routes live in its urls.py.
    path("v1/", include("licensing.urls")),
    path("v1/", include("customers.urls")),
    path("v1/", include("billing.urls")),
    path("v1/", include("events.urls")),
    path("v1/", include("portal.api_urls")),
    # [\s\S], not ".": a path holding a newline (%0A) is an unknown route too.
    re_path(r"^v1(/[\s\S]*)?$", views.api_not_found),
    path(
        "admin/dashboard/",
        admin.site.admin_view(console_views.dashboard),
        name="console-dashboard",
    ),
    path(
        "admin/dashboard/reconcile/",
        admin.site.admin_view(console_views.dashboard_reconcile),
        name="console-dashboard-reconcile",
    ),
    path(
        "admin/offline/",
        admin.site.admin_view(console_views.offline_files),
        name="console-offline",
    ),
    path(
        "admin/invoice-preview/",
        admin.site.admin_view(console_views.invoice_preview),
        name="console-invoice-preview",
    ),
    path(
        "admin/invoice-issue/",
        admin.site.admin_view(console_views.invoice_issue),
        name="console-invoice-issue",
    ),
    path(
        "admin/documents/<id:number>/",
        admin.site.admin_view(console_views.document),
        name="console-document",
    ),
    path(
        "admin/documents/<id:number>/pdf/",
        admin.site.admin_view(console_views.document_pdf),
        name="console-document-pdf",
    ),
    path(
        "admin/documents/<id:number>/xml/",
        admin.site.admin_view(console_views.document_xml),
        name="console-document-xml",
    ),
    path(
        "admin/documents/<id:number>/print/",
        admin.site.admin_view(console_views.document_print),
        name="console-document-print",
    ),
    path(
        "admin/documents/<id:number>/credit-note/",
        admin.site.admin_view(console_credit_notes.credit_note),
        name="console-credit-note",
    ),
    path(
        "admin/payments/statement/",
        admin.site.admin_view(console_payments.statement_upload),
        name="console-statement",
    ),
    # Every staff user's, before any other page when SVC_REQUIRE_2FA is on.
    path(
        "admin/second-factor/",
        admin.site.admin_view(second_factor.second_factor),
        name="second-factor",
    ),
    path("admin/", admin.site.urls),
    path("portal/", include("portal.urls")),
]

if settings.SVC_PUBLIC_DOCS:
    from drf_spectacular.views import (
        SpectacularJSONAPIView,
        SpectacularRedocView,
        SpectacularSwaggerView,
    )

    urlpatterns += [
        # JSON, as the name says (SpectacularAPIView answers YAML unless asked for JSON).
        path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
        path("docs", SpectacularSwaggerView.as_view(url_name="openapi"), name="docs"),
        path("redoc", SpectacularRedocView.as_view(url_name="openapi"), name="redoc"),
    ]

handler400 = "config.views.bad_request"
handler500 = "config.views.server_error"
