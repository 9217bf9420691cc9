"""/v1 routes of licensing (included under /v1/ by config.urls)."""

from __future__ import annotations

from django.urls import path

from config import converters  # noqa: F401 - registers <id:...>
from licensing import api

urlpatterns = [
    path("activate", api.ActivateApi.as_view(), name="activate"),
    path("revocations", api.RevocationListApi.as_view(), name="revocations"),
    path("revocations/status", api.RevocationStatusApi.as_view(), name="revocations-status"),
    path("license", api.LicenseRefreshApi.as_view(), name="license-refresh"),
    path("admin/catalogue", api.CatalogueApi.as_view(), name="admin-catalogue"),
    path("admin/batches", api.BatchCreateApi.as_view(), name="admin-batches"),
    path("admin/batches/<id:batch_id>", api.BatchDetailApi.as_view(), name="admin-batch-detail"),
    path("admin/licenses", api.LicenseCreateApi.as_view(), name="admin-licenses"),
    path(
        "admin/licenses/register",
        api.LicenseRegisterApi.as_view(),
        name="admin-licenses-register",
    ),
    path("admin/revoke", api.RevokeApi.as_view(), name="admin-revoke"),
    path("admin/seats/release", api.SeatReleaseApi.as_view(), name="admin-seat-release"),
    path("admin/renew", api.RenewApi.as_view(), name="admin-renew"),
    path("admin/expiring", api.ExpiringApi.as_view(), name="admin-expiring"),
    path("admin/fleet", api.FleetApi.as_view(), name="admin-fleet"),
    path("admin/fleet.csv", api.FleetCsvApi.as_view(), name="admin-fleet-csv"),
]
