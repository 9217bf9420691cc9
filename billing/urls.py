"""/v1 routes of billing (included under /v1/ by config.urls)."""

from __future__ import annotations

from django.urls import path

from billing import api, device_urls, payments_api
from config.api import converters  # noqa: F401 - registers <id:...>

urlpatterns = [
    *device_urls.urlpatterns,  # the usage upload; the device application serves it alone
    # Before the licence's usage: "conflicts" is not a licence id.
    path("admin/usage/conflicts", api.UsageConflictsApi.as_view(), name="admin-usage-conflicts"),
    path("admin/usage/<id:license_id>", api.LicenseUsageApi.as_view(), name="admin-license-usage"),
    path("admin/offline/usage", api.OfflineUsageApi.as_view(), name="admin-offline-usage"),
    path("admin/demo", api.DemoApi.as_view(), name="admin-demo"),
    path("admin/invoice/<id:customer_id>", api.InvoiceApi.as_view(), name="admin-invoice"),
    path("admin/invoices", api.InvoicesApi.as_view(), name="admin-invoices"),
    # .pdf before the detail: an id may hold a dot.
    path("admin/invoices/<id:number>.pdf", api.InvoicePdfApi.as_view(), name="admin-invoice-pdf"),
    path("admin/invoices/<id:number>.xml", api.InvoiceXmlApi.as_view(), name="admin-invoice-xml"),
    path("admin/invoices/<id:number>", api.InvoiceDetailApi.as_view(), name="admin-invoice-detail"),
    path(
        "admin/invoices/<id:number>/credit-note",
        api.CreditNoteApi.as_view(),
        name="admin-credit-note",
    ),
    path(
        "admin/invoices/<id:number>/payments",
        payments_api.InvoicePaymentsApi.as_view(),
        name="admin-invoice-payments",
    ),
    path(
        "admin/payments/camt053",
        payments_api.StatementImportApi.as_view(),
        name="admin-payments-camt053",
    ),
    path(
        "admin/invoices/<id:number>/credit-note/draft",
        api.CreditNoteDraftApi.as_view(),
        name="admin-credit-note-draft",
    ),
]
