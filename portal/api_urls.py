"""/v1 routes of the portal (included under /v1/ by config.urls): the customer API and
the operators' invitations and customers' keys."""

from __future__ import annotations

from django.urls import path

from config.api import converters  # noqa: F401 - registers <id:...>
from portal import api

urlpatterns = [
    path("customer/fleet", api.CustomerFleetApi.as_view(), name="customer-fleet"),
    path("customer/batches", api.CustomerBatchesApi.as_view(), name="customer-batches"),
    path("customer/usage", api.CustomerUsageApi.as_view(), name="customer-usage"),
    path(
        "customer/offline/activations",
        api.CustomerOfflineActivationsApi.as_view(),
        name="customer-offline-activations",
    ),
    path(
        "customer/offline/usage",
        api.CustomerOfflineUsageApi.as_view(),
        name="customer-offline-usage",
    ),
    path("customer/invoices", api.CustomerInvoicesApi.as_view(), name="customer-invoices"),
    path(
        "customer/invoices/<id:number>.pdf",
        api.CustomerInvoicePdfApi.as_view(),
        name="customer-invoice-pdf",
    ),
    path(
        "customer/invoices/<id:number>.xml",
        api.CustomerInvoiceXmlApi.as_view(),
        name="customer-invoice-xml",
    ),
    path(
        "customer/invoices/<id:number>",
        api.CustomerInvoiceDetailApi.as_view(),
        name="customer-invoice-detail",
    ),
    path(
        "admin/customers/<id:customer_id>/users",
        api.CustomerUsersApi.as_view(),
        name="admin-customer-users",
    ),
    path(
        "admin/invitations/<id:invitation_id>/withdraw",
        api.InvitationWithdrawApi.as_view(),
        name="admin-invitation-withdraw",
    ),
    path("admin/customer-keys", api.CustomerKeysApi.as_view(), name="admin-customer-keys"),
    path(
        "admin/customer-keys/<id:prefix>/revoke",
        api.CustomerKeyRevokeApi.as_view(),
        name="admin-customer-key-revoke",
    ),
]
