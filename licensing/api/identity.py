"""The /v1/admin endpoints of suspected clones (issue 45): the list with its evidence,
and revoking the copy that is not the original."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import schema
from config.api.fields import rendered, validated
from config.errors import NotFound
from licensing import clones, identity_serializers
from operators.permissions import requires


class ClonesApi(APIView):
    @extend_schema(
        parameters=[identity_serializers.ClonesQuery, schema.retry_after(429, 503)],
        responses={
            200: identity_serializers.ClonesOut,
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    400: schema.QUERY_ERRORS[400],
                    404: "customer_id names no customer.",
                }
            ),
        },
        description="Suspected clones, newest first (at most 500): a unit's licence "
        "presented with identity components below its policy, or with its very components "
        "from two addresses in turn faster than one camera moves, with the evidence and the "
        "original (the unit's first activation).",
    )
    @requires("view_service")
    def get(self, request):
        query = validated(identity_serializers.ClonesQuery, request.query_params.dict())
        answer = {"clones": clones.clone_rows(customer_id=query.get("customer_id"))}
        return Response(rendered(identity_serializers.ClonesOut, answer))


class CloneRevokeCopyApi(APIView):
    @extend_schema(
        request=None,
        responses={
            200: identity_serializers.CloneOut,
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such clone suspicion."}),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Revoke the copy a suspicion names, never the original: requests "
        "presenting the copy's components for the licence (for the same components from two "
        "addresses: requests from the copy's address) are refused (403, code "
        "CLONE_COPY_REVOKED) from now on. Idempotent.",
    )
    @requires("revoke_licences")
    def post(self, request, suspicion_id: str):
        if not suspicion_id.isascii() or not suspicion_id.isdigit() or len(suspicion_id) > 18:
            raise NotFound(f"no clone suspicion {suspicion_id}")
        suspicion = clones.clone_copy_revoke(suspicion_id=int(suspicion_id))
        return Response(rendered(identity_serializers.CloneOut, clones.clone_row(suspicion)))
