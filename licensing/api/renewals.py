"""The /v1/admin renewal endpoints (issue 16): renew a batch or a direct licence, or
quote what a renewal would do."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import schema
from config.api.fields import rendered, validated
from config.errors import InvalidInput
from licensing import serializers, services
from operators.permissions import requires


def _idempotency_key(request, data: dict) -> str | None:
    """The key of a renewal: the body's ``idempotency_key`` or the ``Idempotency-Key``
    header (both: they must agree)."""
    header = request.headers.get("Idempotency-Key")
    body = data.pop("idempotency_key", None)
    if header is not None and body is not None and header.strip() != body.strip():
        raise InvalidInput(
            "idempotency_key in the body and the Idempotency-Key header differ; send one"
        )
    return body if body is not None else header


class RenewApi(APIView):
    @extend_schema(
        request=serializers.RenewIn,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="The renewal's idempotency key, when not in the body.",
            ),
            schema.retry_after(429, 503),
        ],
        responses={
            201: serializers.RenewalOut,
            200: OpenApiResponse(
                serializers.RenewalOut,
                description="A retry: the renewal made earlier with this idempotency key "
                "(replayed true), nothing renewed again.",
            ),
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or no idempotency key, neither or both "
                    "of batch_id and license_id, a unit, offline-minted or perpetual licence, "
                    "a trial batch (convert it), or a term that would end in the past or "
                    "after 9999.",
                    404: "No such batch or licence.",
                    409: "The licence is revoked, or the idempotency key was used for "
                    "another request.",
                }
            ),
        },
        description="Renew a batch (batch_id) or a direct licence (license_id) for term_days "
        "more (default: the SKU's term). Before its end the term runs from that end; after "
        "it but within grace, from the old end; after grace, from now. The batch key or "
        "licence is re-signed with the new end (the earlier token still counts); the "
        "batch's cameras fetch renewed unit licences at their next sync. Billed once, as a "
        "renewal line: units activated now x the batch's unit price (1 x the licence's). "
        "Idempotent per idempotency_key (body field or Idempotency-Key header).",
    )
    @requires("renew_licences")
    def post(self, request):
        data = validated(serializers.RenewIn, request.data)
        key = _idempotency_key(request, data)
        result = services.license_renew(idempotency_key=key, **data)
        code = status.HTTP_200_OK if result.replayed else status.HTTP_201_CREATED
        return Response(rendered(serializers.RenewalOut, result), status=code)


class RenewQuoteApi(APIView):
    @extend_schema(
        request=serializers.RenewQuoteIn,
        parameters=[schema.retry_after(429, 503)],
        responses={
            200: serializers.RenewalQuoteOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or neither or both of batch_id and "
                    "license_id, a unit, offline-minted or perpetual licence, or a term that "
                    "would end in the past or after 9999.",
                    404: "No such batch or licence.",
                    409: "The licence is revoked.",
                }
            ),
        },
        description="What POST /v1/admin/renew would do now, without doing it: the new "
        "end, the basis, the units and the amount it would bill (svcctl renew --dry-run, "
        "and its confirmation). Nothing is renewed, billed, audited or emitted.",
    )
    @requires("renew_licences")
    def post(self, request):
        data = validated(serializers.RenewQuoteIn, request.data)
        quote = services.renewal_quote(**data)
        return Response(rendered(serializers.RenewalQuoteOut, quote))
