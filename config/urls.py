from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.urls import include, path, re_path

from config import (
    converters,  # noqa: F401 - registers <id:...>
    views,
)
from console import views as console_views
from customers.api import CustomerCreateApi, CustomerDetailApi
from licensing import api as licensing_api
from licensing import health

v1 = [
    path("activate", licensing_api.ActivateApi.as_view(), name="activate"),
    path("revocations", licensing_api.RevocationListApi.as_view(), name="revocations"),
    path(
        "revocations/status",
        licensing_api.RevocationStatusApi.as_view(),
        name="revocations-status",
    ),
    path("license", licensing_api.LicenseRefreshApi.as_view(), name="license-refresh"),
    path("admin/catalogue", licensing_api.CatalogueApi.as_view(), name="admin-catalogue"),
    path("admin/customers", CustomerCreateApi.as_view(), name="admin-customers"),
    path(
        "admin/customers/<id:customer_id>",
        CustomerDetailApi.as_view(),
        name="admin-customer-detail",
    ),
    path("admin/batches", licensing_api.BatchCreateApi.as_view(), name="admin-batches"),
    path(
        "admin/batches/<id:batch_id>",
        licensing_api.BatchDetailApi.as_view(),
        name="admin-batch-detail",
    ),
    path("admin/licenses", licensing_api.LicenseCreateApi.as_view(), name="admin-licenses"),
    path(
        "admin/licenses/register",
        licensing_api.LicenseRegisterApi.as_view(),
        name="admin-licenses-register",
    ),
    path("admin/revoke", licensing_api.RevokeApi.as_view(), name="admin-revoke"),
    path("admin/seats/release", licensing_api.SeatReleaseApi.as_view(), name="admin-seat-release"),
    path("admin/renew", licensing_api.RenewApi.as_view(), name="admin-renew"),
    path("admin/expiring", licensing_api.ExpiringApi.as_view(), name="admin-expiring"),
    path("admin/fleet", licensing_api.FleetApi.as_view(), name="admin-fleet"),
    path("admin/fleet.csv", licensing_api.FleetCsvApi.as_view(), name="admin-fleet-csv"),
]

urlpatterns = [
    path("", views.index, name="index"),
    path("healthz", health.healthz, name="healthz"),
    path("v1/", include(v1)),
    path("v1/", include("billing.urls")),
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
        "admin/invoice-preview/",
        admin.site.admin_view(console_views.invoice_preview),
        name="console-invoice-preview",
    ),
    path("admin/", admin.site.urls),
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
