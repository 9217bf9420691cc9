"""/v1 routes of billing (included under /v1/ by config.urls)."""

from __future__ import annotations

from django.urls import path

from billing import api
from config import converters  # noqa: F401 - registers <id:...>

urlpatterns = [
    path("usage", api.UsageUploadApi.as_view(), name="usage"),
    path("admin/usage/<id:license_id>", api.LicenseUsageApi.as_view(), name="admin-license-usage"),
    path("admin/invoice/<id:customer_id>", api.InvoiceApi.as_view(), name="admin-invoice"),
    path("admin/invoices", api.InvoiceIssueApi.as_view(), name="admin-invoices"),
    path(
        "admin/invoices/<id:number>/credit-note",
        api.CreditNoteApi.as_view(),
        name="admin-credit-note",
    ),
]
