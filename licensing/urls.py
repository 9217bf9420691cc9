"""/v1 routes of licensing (included under /v1/ by config.urls)."""

from __future__ import annotations

from django.urls import path

from config import converters  # noqa: F401 - registers <id:...>
from licensing import api, device_urls

urlpatterns = [
    *device_urls.urlpatterns,  # what cameras call; the device application serves them alone
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
    path("admin/renew/quote", api.RenewQuoteApi.as_view(), name="admin-renew-quote"),
    path("admin/expiring", api.ExpiringApi.as_view(), name="admin-expiring"),
    path("admin/fleet", api.FleetApi.as_view(), name="admin-fleet"),
    path("admin/fleet.csv", api.FleetCsvApi.as_view(), name="admin-fleet-csv"),
]
