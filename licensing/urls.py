"""/v1 routes of licensing (included under /v1/ by config.urls)."""

from __future__ import annotations

from django.urls import path

from config.api import converters  # noqa: F401 - registers <id:...>
from licensing import device_urls
from licensing.api import addons, fleet, identity, licenses, offline, renewals, trials

urlpatterns = [
    *device_urls.urlpatterns,  # what cameras call; the device application serves them alone
    path("admin/catalogue", licenses.CatalogueApi.as_view(), name="admin-catalogue"),
    path("admin/batches", licenses.BatchCreateApi.as_view(), name="admin-batches"),
    path(
        "admin/batches/<id:batch_id>", licenses.BatchDetailApi.as_view(), name="admin-batch-detail"
    ),
    path(
        "admin/batches/<id:batch_id>/addons",
        addons.BatchAddOnsApi.as_view(),
        name="admin-batch-addons",
    ),
    path(
        "admin/batches/<id:batch_id>/addons/<id:addon>",
        addons.BatchAddOnApi.as_view(),
        name="admin-batch-addon",
    ),
    path(
        "admin/batches/<id:batch_id>/convert",
        trials.TrialConvertApi.as_view(),
        name="admin-batch-convert",
    ),
    path(
        "admin/batches/<id:batch_id>/convert/quote",
        trials.TrialConvertQuoteApi.as_view(),
        name="admin-batch-convert-quote",
    ),
    path("admin/licenses", licenses.LicenseCreateApi.as_view(), name="admin-licenses"),
    path(
        "admin/licenses/<id:license_id>/addons",
        addons.LicenseAddOnsApi.as_view(),
        name="admin-license-addons",
    ),
    path(
        "admin/licenses/<id:license_id>/addons/<id:addon>",
        addons.LicenseAddOnApi.as_view(),
        name="admin-license-addon",
    ),
    path(
        "admin/licenses/register",
        licenses.LicenseRegisterApi.as_view(),
        name="admin-licenses-register",
    ),
    path(
        "admin/offline/activations",
        offline.OfflineActivationApi.as_view(),
        name="admin-offline-activations",
    ),
    path("admin/revoke", licenses.RevokeApi.as_view(), name="admin-revoke"),
    path("admin/suspend", licenses.SuspendApi.as_view(), name="admin-suspend"),
    path("admin/reinstate", licenses.ReinstateApi.as_view(), name="admin-reinstate"),
    path("admin/seats/release", licenses.SeatReleaseApi.as_view(), name="admin-seat-release"),
    path("admin/renew", renewals.RenewApi.as_view(), name="admin-renew"),
    path("admin/renew/quote", renewals.RenewQuoteApi.as_view(), name="admin-renew-quote"),
    path("admin/expiring", fleet.ExpiringApi.as_view(), name="admin-expiring"),
    path("admin/fleet", fleet.FleetApi.as_view(), name="admin-fleet"),
    path("admin/clones", identity.ClonesApi.as_view(), name="admin-clones"),
    path(
        "admin/clones/<id:suspicion_id>/revoke-copy",
        identity.CloneRevokeCopyApi.as_view(),
        name="admin-clone-revoke-copy",
    ),
    path("admin/fleet.csv", fleet.FleetCsvApi.as_view(), name="admin-fleet-csv"),
]
