"""The /v1 billing endpoints: usage upload (devices) and usage and invoice reads
(operators). One view per operation: parse, call one service or selector, render."""

from __future__ import annotations

from rest_framework.response import Response
from rest_framework.views import APIView

from billing import selectors, serializers, services
from config.errors import InvalidInput


def _bearer(request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class UsageUploadApi(APIView):
    def post(self, request):
        body = request.data
        if not isinstance(body, dict):
            raise InvalidInput("body must be a JSON object {device_id, license_id, records, nonce}")
        result = services.usage_ingest(
            token=_bearer(request),
            device_id=body.get("device_id"),
            records=body.get("records"),
            nonce=body.get("nonce"),
        )
        return Response(result)


class LicenseUsageApi(APIView):
    def get(self, request, license_id: str):
        return Response(selectors.license_usage(license_id=license_id))


class InvoiceApi(APIView):
    def get(self, request, customer_id: str):
        query = serializers.InvoiceQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rated = services.invoice_rate(
            customer_id=customer_id, period_days=query.validated_data["period_days"]
        )
        return Response(rated)
