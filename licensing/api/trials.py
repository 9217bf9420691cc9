"""The /v1/admin trial endpoints (issue 42): convert a trial batch to paid, or quote
what that would do."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import schema
from config.api.fields import rendered, validated
from licensing import serializers, services
from operators.permissions import requires

_ERRORS = {
    **schema.BODY_ERRORS,
    **schema.ADMIN_ERRORS,
    400: f"{schema.BODY_ERRORS[400]} Or a term out of bounds, or a term for a perpetual batch.",
    404: "No such batch.",
    409: "The batch is not a trial (never was, or its key is revoked), or it was converted "
    "before with another term_days.",
}


class TrialConvertApi(APIView):
    @extend_schema(
        request=serializers.TrialConvertIn,
        parameters=[schema.id_path("batch_id", "The trial batch."), schema.retry_after(429, 503)],
        responses={
            201: serializers.TrialConversionOut,
            200: OpenApiResponse(
                serializers.TrialConversionOut,
                description="Converted before: that conversion (replayed true), nothing "
                "converted or billed again.",
            ),
            **schema.errors(_ERRORS),
        },
        description="Convert a trial batch to paid: the batch and its trial units in service "
        "run the paid term from now (term_days, default the batch's term as issued); each "
        "camera fetches its paid licence at its next sync, without re-activating. Billed "
        "once, as a trial_conversion line: those units x the batch's unit price. Later "
        "activations of the batch are paid activations. Idempotent per batch.",
    )
    @requires("issue_licences")
    def post(self, request, batch_id: str):
        data = validated(serializers.TrialConvertIn, request.data)
        result = services.trial_convert(batch_id=batch_id, **data)
        code = status.HTTP_200_OK if result.replayed else status.HTTP_201_CREATED
        return Response(rendered(serializers.TrialConversionOut, result), status=code)


class TrialConvertQuoteApi(APIView):
    @extend_schema(
        request=serializers.TrialConvertIn,
        parameters=[schema.id_path("batch_id", "The trial batch."), schema.retry_after(429, 503)],
        responses={
            200: serializers.TrialConversionQuoteOut,
            **schema.errors(_ERRORS | {409: "The batch is not a trial, or its key is revoked."}),
        },
        description="What POST /v1/admin/batches/{batch_id}/convert would do now, without "
        "doing it: the units on trial, the amount and the new end (svcctl convert-trial "
        "--dry-run, and its confirmation). Nothing is converted, billed, audited or emitted.",
    )
    @requires("issue_licences")
    def post(self, request, batch_id: str):
        data = validated(serializers.TrialConvertIn, request.data)
        quote = services.trial_conversion_quote(batch_id=batch_id, **data)
        return Response(rendered(serializers.TrialConversionQuoteOut, quote))
