"""The /v1/admin add-on endpoints (issue 42 item 4): list, add and remove the add-ons of
a batch (all its units) or a direct licence. Adding is a sale (``issue_licences``)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import schema
from config.api.fields import rendered, validated
from licensing import selectors, serializers, services
from licensing.services import AddOnChange
from operators.permissions import requires

_ADD_ERRORS = {
    **schema.BODY_ERRORS,
    **schema.ADMIN_ERRORS,
    400: f"{schema.BODY_ERRORS[400]} Or an add-on the SKU does not have or no longer "
    "offers; on a licence, a unit licence (add it to its batch) or an offline-minted one.",
    404: "No such batch or licence.",
    409: "The batch key or licence is revoked, or its term has ended (renew it first).",
}
_REMOVE_ERRORS = {
    **schema.ADMIN_ERRORS,
    400: "reason too long or not text; on a licence, a unit licence (remove it from its "
    "batch) or an offline-minted one.",
    404: "No such batch or licence, or the add-on was never added to it.",
}


class _Shown:
    """A change as AddOnChangeOut renders it: the grant's fields, with ``changed`` and
    the target's ``expires_at``."""

    def __init__(self, change: AddOnChange) -> None:
        self.changed, self.expires_at = change.changed, change.expires_at
        self._grant = change.grant

    def __getattr__(self, name: str):
        return getattr(self._grant, name)


def _listed(found: selectors.AddOnGrants) -> Response:
    return Response(
        rendered(
            serializers.AddOnListOut,
            {"batch_id": found.batch_id, "license_id": found.license_id, "addons": found.addons},
        )
    )


def _answer(change: AddOnChange, created: bool = False) -> Response:
    code = status.HTTP_201_CREATED if created and change.changed else status.HTTP_200_OK
    return Response(rendered(serializers.AddOnChangeOut, _Shown(change)), status=code)


class BatchAddOnsApi(APIView):
    @extend_schema(
        parameters=[schema.id_path("batch_id", "The batch."), schema.retry_after(429, 503)],
        responses={
            200: serializers.AddOnListOut,
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such batch."}),
        },
        description="The add-ons sold for the batch, active ones first.",
    )
    @requires("view_service")
    def get(self, request, batch_id: str):
        return _listed(selectors.addon_grants(batch_id=batch_id))

    @extend_schema(
        request=serializers.AddOnIn,
        parameters=[schema.id_path("batch_id", "The batch."), schema.retry_after(429, 503)],
        responses={
            201: serializers.AddOnChangeOut,
            200: OpenApiResponse(
                serializers.AddOnChangeOut,
                description="Already active: the grant as it stands (changed false).",
            ),
            **schema.errors(_ADD_ERRORS),
        },
        description="Add one of the SKU's catalogue add-ons to the batch, for every unit of "
        "it: each unit receives it at its next sync (GET /v1/license) or activation, and is "
        "billed from then to the batch's end, pro rata of the SKU's term (docs/finance.md). "
        "Idempotent.",
    )
    @requires("issue_licences")
    def post(self, request, batch_id: str):
        data = validated(serializers.AddOnIn, request.data)
        return _answer(services.addon_add(batch_id=batch_id, **data), created=True)


class BatchAddOnApi(APIView):
    @extend_schema(
        parameters=[
            schema.id_path("batch_id", "The batch."),
            schema.id_path("addon", "The add-on's code."),
            # Its fields' rules (no NUL, 500 characters) as the schema states them.
            serializers.AddOnRemoveQuery,
            schema.retry_after(429, 503),
        ],
        responses={200: serializers.AddOnChangeOut, **schema.errors(_REMOVE_ERRORS)},
        description="Remove the add-on from the batch: each unit loses it at its next sync. "
        "Nothing is billed back (a refund is a credit note). Idempotent.",
    )
    @requires("issue_licences")
    def delete(self, request, batch_id: str, addon: str):
        query = validated(serializers.AddOnRemoveQuery, request.query_params.dict())
        return _answer(services.addon_remove(batch_id=batch_id, addon=addon, **query))


class LicenseAddOnsApi(APIView):
    @extend_schema(
        parameters=[schema.id_path("license_id", "The licence."), schema.retry_after(429, 503)],
        responses={
            200: serializers.AddOnListOut,
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such licence."}),
        },
        description="The add-ons sold for a direct licence; for a unit or a batch key, those "
        "of its batch (batch_id set).",
    )
    @requires("view_service")
    def get(self, request, license_id: str):
        return _listed(selectors.addon_grants(license_id=license_id))

    @extend_schema(
        request=serializers.AddOnIn,
        parameters=[schema.id_path("license_id", "The licence."), schema.retry_after(429, 503)],
        responses={
            201: serializers.AddOnChangeOut,
            200: OpenApiResponse(
                serializers.AddOnChangeOut,
                description="Already active: the grant as it stands (changed false).",
            ),
            **schema.errors(_ADD_ERRORS),
        },
        description="Add one of the SKU's catalogue add-ons to a direct licence (a batch "
        "key's id names its batch): it is re-signed now and its device receives it at its "
        "next sync; billed from now to its end, pro rata of the SKU's term. Idempotent.",
    )
    @requires("issue_licences")
    def post(self, request, license_id: str):
        data = validated(serializers.AddOnIn, request.data)
        return _answer(services.addon_add(license_id=license_id, **data), created=True)


class LicenseAddOnApi(APIView):
    @extend_schema(
        parameters=[
            schema.id_path("license_id", "The licence."),
            schema.id_path("addon", "The add-on's code."),
            # Its fields' rules (no NUL, 500 characters) as the schema states them.
            serializers.AddOnRemoveQuery,
            schema.retry_after(429, 503),
        ],
        responses={200: serializers.AddOnChangeOut, **schema.errors(_REMOVE_ERRORS)},
        description="Remove the add-on from a direct licence: re-signed now without it, its "
        "device loses it at its next sync. Nothing is billed back. Idempotent.",
    )
    @requires("issue_licences")
    def delete(self, request, license_id: str, addon: str):
        query = validated(serializers.AddOnRemoveQuery, request.query_params.dict())
        return _answer(services.addon_remove(license_id=license_id, addon=addon, **query))
