"""The /v1 routes cameras call (under /v1/): served by the full application
(``licensing.urls`` includes them) and by the device application alone
(``config.device_urls``)."""

from __future__ import annotations

from django.urls import path

from licensing.api import devices

urlpatterns = [
    path("activate", devices.ActivateApi.as_view(), name="activate"),
    path("revocations", devices.RevocationListApi.as_view(), name="revocations"),
    path("revocations/status", devices.RevocationStatusApi.as_view(), name="revocations-status"),
    path("license", devices.LicenseRefreshApi.as_view(), name="license-refresh"),
]
