"""The /v1 billing endpoints: usage upload (devices); usage and invoice reads, issuing
the next invoice (409 naming the invoice a period conflicts with) and credit notes
(operators). One view per operation: parse, call one service or selector, render."""

from __future__ import annotations

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import selectors, serializers, services
from config.errors import InvalidInput
from licensing import signing
from svccore.claims import device_id_problem


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
        device_id = body.get("device_id")
        # The check every device id entry shares (control and bidi characters refused);
        # the service checks the type and compares it with the token's.
        problem = device_id_problem(device_id) if isinstance(device_id, str) else ""
        if problem:
            raise InvalidInput(f"device_id {problem}")
        result = services.usage_ingest(
            token=_bearer(request),
            device_id=device_id,
            records=body.get("records"),
            nonce=body.get("nonce"),
        )
        # The receipt's signing key, for devices that have not seen its certificate yet.
        certificate = signing.active_certificate()
        return Response({**result, "certificates": [certificate] if certificate else []})


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


class InvoiceIssueApi(APIView):
    def post(self, request):
        query = serializers.InvoiceIssueIn(data=request.data)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        invoice = services.invoice_issue(
            customer_id=data["customer_id"],
            period_days=data["period_days"],
            end=data.get("period_end"),
        )
        return Response(serializers.invoice_out(invoice), status=status.HTTP_201_CREATED)


class CreditNoteApi(APIView):
    def post(self, request, number: str):
        query = serializers.CreditNoteIn(data=request.data)
        query.is_valid(raise_exception=True)
        note = services.credit_note_issue(number=number, reason=query.validated_data["reason"])
        return Response(serializers.invoice_out(note), status=status.HTTP_201_CREATED)
