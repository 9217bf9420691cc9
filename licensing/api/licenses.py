"""The /v1/admin endpoints of the catalogue, batches and licences: list the catalogue,
issue a batch or a licence, register an offline-minted one, revoke, release a seat."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import schema
from config.api.fields import rendered, validated
from licensing import selectors, serializers, services
from operators.permissions import requires


class CatalogueApi(APIView):
    @extend_schema(
        responses={200: serializers.CatalogueOut, **schema.errors(schema.ADMIN_ERRORS)},
        parameters=[schema.retry_after(429, 503)],
    )
    @requires("view_service")
    def get(self, request):
        # Each entry with its add-ons (issue 42): an addition to contract §5.
        skus = [
            sku.entry() | {"addons": list(sku.addons.all())} for sku in selectors.catalogue_list()
        ]
        return Response(rendered(serializers.CatalogueOut, {"skus": skus}))


class BatchCreateApi(APIView):
    @extend_schema(
        request=serializers.BatchIn,
        responses={
            201: serializers.BatchOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or an unknown SKU.",
                    404: "Unknown customer.",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Sell units of a SKU: a batch and its batch key. term_days null: the "
        "SKU's default term. trial_days makes it a trial batch (issue 42): each camera's "
        "licence runs that many days from its activation, unbilled until the batch is "
        "converted; null: the SKU's trial days, 0: not a trial.",
    )
    @requires("issue_licences")
    def post(self, request):
        data = validated(serializers.BatchIn, request.data)
        batch = services.batch_issue(**data)
        return Response(rendered(serializers.BatchOut, batch), status=status.HTTP_201_CREATED)


class BatchDetailApi(APIView):
    @extend_schema(
        parameters=[schema.id_path("batch_id", "The batch."), schema.retry_after(429, 503)],
        responses={
            200: serializers.BatchStatusOut,
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such batch."}),
        },
        description="Seat accounting of a batch.",
    )
    @requires("view_service")
    def get(self, request, batch_id: str):
        batch = selectors.batch_get(batch_id=batch_id)
        return Response(rendered(serializers.BatchStatusOut, batch))


class LicenseCreateApi(APIView):
    @extend_schema(
        request=serializers.LicenseIn,
        responses={
            201: serializers.LicenseOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or an unknown SKU, or device_id '*' "
                    "with activation 'optional'.",
                    404: "Unknown customer.",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Issue a direct licence for one camera, priced at one unit.",
    )
    @requires("issue_licences")
    def post(self, request):
        data = validated(serializers.LicenseIn, request.data)
        lic = services.license_issue(**data)
        return Response(rendered(serializers.LicenseOut, lic), status=status.HTTP_201_CREATED)


class LicenseRegisterApi(APIView):
    """``POST /v1/admin/licenses/register``: put an offline-minted licence on file."""

    @extend_schema(
        request=serializers.LicenseRegisterIn,
        responses={
            201: serializers.LicenseRegisterOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or the token is not an SVC1 licence, is "
                    "unbound, not act 'optional', or names an unknown SKU.",
                    403: f"{schema.ADMIN_ERRORS[403]} Or the licence does not verify under a "
                    "registered signing key that is not revoked.",
                    404: "The licence names an unknown customer.",
                    409: "The licence is already registered, or another one has its id.",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
    )
    @requires("issue_licences")
    def post(self, request):
        data = validated(serializers.LicenseRegisterIn, request.data)
        lic = services.license_register(**data)
        return Response(
            rendered(serializers.LicenseRegisterOut, lic), status=status.HTTP_201_CREATED
        )


class RevokeApi(APIView):
    @extend_schema(
        request=serializers.RevokeIn,
        responses={
            200: serializers.RevokeOut,
            **schema.errors({**schema.BODY_ERRORS, **schema.ADMIN_ERRORS, 404: "No such licence."}),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Revoke a licence. Idempotent: again keeps the first time and reason.",
    )
    @requires("revoke_licences")
    def post(self, request):
        data = validated(serializers.RevokeIn, request.data)
        lic = services.license_revoke(**data)
        return Response(rendered(serializers.RevokeOut, lic))


class SeatReleaseApi(APIView):
    @extend_schema(
        request=serializers.SeatReleaseIn,
        responses={
            200: serializers.SeatReleaseOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or no reason, the seat named both ways "
                    "or neither, or a licence that is not a unit licence.",
                    404: "No such licence, batch, or device on the batch.",
                    409: "The batch's release policy is spent for now (the detail says when "
                    "the next release is possible), or the batch is a trial (its seats were "
                    "never paid for).",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Release the seat of a dead or replaced camera: its unit licence is "
        "revoked and the seat returns to the batch; the next activation on the batch takes "
        "it as a transfer, not billed again. Name the seat by license_id, or by batch_id and "
        "device_id. Idempotent: again answers the first release (already_released).",
    )
    @requires("release_seats")
    def post(self, request):
        data = validated(serializers.SeatReleaseIn, request.data)
        result = services.seat_release(**data)
        return Response(rendered(serializers.SeatReleaseOut, result))


class SuspendApi(APIView):
    @extend_schema(
        request=serializers.SuspendIn,
        responses={
            200: serializers.HoldOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or not exactly one of license_id, "
                    "batch_id, customer_id, or a blank reason.",
                    404: "No such licence, batch or customer.",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Suspend a licence, a batch key (all its units) or a customer (all its "
        "licences): their signed statuses say suspended, and cameras refuse analytics "
        "(SUSPENDED) at their next sync while video runs. Reversible (reinstate), unlike a "
        "revocation; seats and per-unit charges are unchanged. Idempotent.",
    )
    @requires("suspend_licences")
    def post(self, request):
        data = validated(serializers.SuspendIn, request.data)
        return Response(rendered(serializers.HoldOut, services.license_suspend(**data)))


class ReinstateApi(APIView):
    @extend_schema(
        request=serializers.ReinstateIn,
        responses={
            200: serializers.HoldOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or not exactly one of license_id, "
                    "batch_id, customer_id.",
                    404: "No such licence, batch or customer.",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Lift the hold on the licence, batch or customer named: analytics resume "
        "at each camera's next sync (unless another hold still covers it). Idempotent.",
    )
    @requires("suspend_licences")
    def post(self, request):
        data = validated(serializers.ReinstateIn, request.data)
        return Response(rendered(serializers.HoldOut, services.license_reinstate(**data)))
