from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import schema
from config.api.fields import rendered, validated
from customers.serializers import CustomerIn, CustomerOut, CustomerPatchIn
from customers.services import customer_create, customer_get, customer_update
from operators.permissions import requires


class CustomerCreateApi(APIView):
    @extend_schema(
        request=CustomerIn,
        responses={
            201: CustomerOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or an id that is not 1-59 characters of "
                    "A-Z, 0-9, '-' or '_' after the CUST- prefix.",
                    409: "The id is taken, or another customer has the name (ignoring "
                    "case and surrounding spaces); detail names that customer's id.",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Create a customer; an operator-chosen id is stored with the CUST- prefix. "
        "Names are unique, ignoring case and surrounding spaces.",
    )
    @requires("manage_customers")
    def post(self, request):
        customer = customer_create(**validated(CustomerIn, request.data))
        return Response(rendered(CustomerOut, customer), status=status.HTTP_201_CREATED)


class CustomerDetailApi(APIView):
    """``GET /v1/admin/customers/{customer_id}``: one customer, or 404."""

    @extend_schema(
        parameters=[
            schema.id_path("customer_id", "The customer."),
            schema.retry_after(429, 503),
        ],
        responses={
            200: CustomerOut,
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such customer."}),
        },
        description="A customer by id.",
    )
    @requires("view_service")
    def get(self, request, customer_id: str):
        return Response(rendered(CustomerOut, customer_get(customer_id=customer_id)))

    @extend_schema(
        request=CustomerPatchIn,
        parameters=[
            schema.id_path("customer_id", "The customer."),
            schema.retry_after(429, 503),
        ],
        responses={
            200: CustomerOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or a field that cannot be changed "
                    "(kind, id), named.",
                    404: "No such customer.",
                    409: "Another customer has the new name; detail names its id.",
                }
            ),
        },
        description="Change a customer's name, contact, billing address or tax id; fields "
        "left out keep their value. Audited with each field's value before and after.",
    )
    @requires("manage_customers")
    def patch(self, request, customer_id: str):
        values = validated(CustomerPatchIn, request.data)
        customer = customer_update(customer_id=customer_id, **values)
        return Response(rendered(CustomerOut, customer))
