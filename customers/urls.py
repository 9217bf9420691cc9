"""/v1 routes of customers (included under /v1/ by config.urls)."""

from __future__ import annotations

from django.urls import path

from config.api import converters  # noqa: F401 - registers <id:...>
from customers import api

urlpatterns = [
    path("admin/customers", api.CustomerCreateApi.as_view(), name="admin-customers"),
    path(
        "admin/customers/<id:customer_id>",
        api.CustomerDetailApi.as_view(),
        name="admin-customer-detail",
    ),
]
