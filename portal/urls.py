"""/portal/ (included by config.urls): the customer portal's pages."""

from __future__ import annotations

from django.urls import path

from config.api import converters  # noqa: F401 - registers <id:...>
from portal import identity_views, views

urlpatterns = [
    path("", views.dashboard, name="portal-dashboard"),
    path("login/", views.PortalLoginView.as_view(), name="portal-login"),
    path("logout/", views.PortalLogoutView.as_view(), name="portal-logout"),
    path("second-factor/", views.second_factor, name="portal-second-factor"),
    # The e-mailed link; its base (no secret) is what invitations are made from.
    path("invitation/", views.invitation_base, name="portal-invitation-base"),
    path("invitation/<str:secret>/", views.invitation, name="portal-invitation"),
    path("batches/", views.batches, name="portal-batches"),
    path("batches/<id:batch_id>/", views.batch, name="portal-batch"),
    path("batches/<id:batch_id>/buy/", views.batch_buy, name="portal-batch-buy"),
    path("fleet/", views.fleet, name="portal-fleet"),
    path("fleet.csv", views.fleet_csv, name="portal-fleet-csv"),
    path("invoices/", views.invoices, name="portal-invoices"),
    path("invoices/<id:number>/", views.document, name="portal-document"),
    path("invoices/<id:number>/pdf/", views.document_pdf, name="portal-document-pdf"),
    path("invoices/<id:number>/xml/", views.document_xml, name="portal-document-xml"),
    path("renewals/", views.renewals, name="portal-renewals"),
    path("clones/", identity_views.clones, name="portal-clones"),
    path("offline/", views.offline, name="portal-offline"),
    path("api-keys/", views.api_keys, name="portal-api-keys"),
    path("api-keys/<str:prefix>/revoke/", views.api_key_revoke, name="portal-api-key-revoke"),
    path("webhooks/", views.webhooks, name="portal-webhooks"),
    path("webhooks/<id:webhook_id>/delete/", views.webhook_delete, name="portal-webhook-delete"),
    path("webhooks/<id:webhook_id>/rotate/", views.webhook_rotate, name="portal-webhook-rotate"),
    path("webhooks/<id:webhook_id>/test/", views.webhook_test, name="portal-webhook-test"),
]
