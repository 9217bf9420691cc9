"""``POST /v1/admin/offline/activations``: an operator answers an air-gapped camera's
activation request file (issue 44, :mod:`licensing.services.offline`)."""

from __future__ import annotations

import math

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import schema
from config.api.fields import rendered, validated
from config.clientip import client_ip
from config.errors import RateLimited
from licensing import offline_serializers as shapes
from licensing.services.offline import offline_activate
from licensing.throttling import ActivationRateThrottle
from operators.permissions import requires
from svccore.rates import parse_rate

ACTIVATION_ERRORS = {
    400: "The request file is damaged or truncated (the detail names the device module's "
    "code, BAD_REQUEST), or its device id is not one.",
    402: "Batch exhausted (the detail names the batch and its counts).",
    403: "Bad signature, expired, revoked, held or foreign batch key, or a revoked unit.",
}


class ActivationRateLimited:
    """The per-address activation limit of ``POST /v1/activate`` (SVC_ACTIVATION_RATE),
    on top of the view's own: a request file takes a seat as an activation does."""

    def get_throttles(self):
        return [*super().get_throttles(), ActivationRateThrottle()]

    def throttled(self, request, wait):
        limit, span = parse_rate(settings.SVC_ACTIVATION_RATE)
        retry = max(1, math.ceil(wait or span))
        raise RateLimited(
            retry,
            f"activation rate limit exceeded: {limit} requests per {span} s per IP; "
            f"retry in {retry} s",
        )


def activation_answer(request, **scope) -> Response:
    data = validated(shapes.OfflineActivationIn, request.data)
    done = offline_activate(
        request_text=data["request"], client_ip=client_ip(request) or None, **scope
    )
    answer = {
        "answer": done.answer,
        "license_id": done.result.license_id,
        "device_id": done.device_id,
        "reactivated": done.result.reactivated,
        "batch_units_remaining": None
        if done.result.reactivated
        else done.result.batch_units_remaining,
    }
    return Response(rendered(shapes.OfflineActivationOut, answer))


class OfflineActivationApi(ActivationRateLimited, APIView):
    @extend_schema(
        request=shapes.OfflineActivationIn,
        responses={
            200: shapes.OfflineActivationOut,
            **schema.errors({**schema.ADMIN_ERRORS, **schema.BODY_ERRORS, **ACTIVATION_ERRORS}),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Answer an air-gapped camera's activation request file: the seat is "
        "taken as POST /v1/activate takes it; the answer file holds the unit licence, its "
        "signed status and the key certificates.",
    )
    @requires("issue_licences")
    def post(self, request):
        return activation_answer(request, channel="api", actor=str(request.user or ""))
