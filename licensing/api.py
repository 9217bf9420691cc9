"""The /v1 device and admin endpoints of the licensing authority. One view per
operation: parse, call one service, render. Errors are raised, never caught here."""

from __future__ import annotations

import time

from django.conf import settings
from django.utils import timezone
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from licensing import selectors, serializers, services
from licensing.throttling import ActivationRateThrottle, client_ip, parse_rate


def _valid(serializer_class, data):
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class ActivateApi(APIView):
    throttle_classes = [ActivationRateThrottle]

    def throttled(self, request, wait):
        limit, span = parse_rate(settings.SVC_ACTIVATION_RATE)
        raise exceptions.Throttled(
            wait,
            detail=f"activation rate limit exceeded: {limit} requests per {span} s per IP; "
            f"retry in {int(wait or span)} s",
        )

    def post(self, request):
        data = _valid(serializers.ActivateIn, request.data)
        result = services.unit_activate(**data, client_ip=client_ip(request) or None)
        body = {
            "unit_token": result.license.token,
            "license_id": result.license.id,
            "reactivated": result.reactivated,
        }
        if not result.reactivated:
            body["batch_units_remaining"] = result.batch_units_remaining
        return Response(body)


class RevocationListApi(APIView):
    def get(self, request):
        return Response({"revoked": selectors.revoked_license_ids(), "as_of": int(time.time())})


class CatalogueApi(APIView):
    def get(self, request):
        return Response({"skus": [sku.entry() for sku in selectors.catalogue_list()]})


class BatchCreateApi(APIView):
    def post(self, request):
        data = _valid(serializers.BatchIn, request.data)
        batch = services.batch_issue(**data)
        return Response(serializers.BatchOut(batch).data, status=status.HTTP_201_CREATED)


class BatchDetailApi(APIView):
    def get(self, request, batch_id: str):
        batch = selectors.batch_get(batch_id=batch_id)
        return Response(serializers.BatchStatusOut(batch).data)


class LicenseCreateApi(APIView):
    def post(self, request):
        data = _valid(serializers.LicenseIn, request.data)
        lic = services.license_issue(**data)
        return Response(serializers.LicenseOut(lic).data, status=status.HTTP_201_CREATED)


class RevokeApi(APIView):
    def post(self, request):
        data = _valid(serializers.RevokeIn, request.data)
        lic = services.license_revoke(**data)
        return Response(serializers.RevokeOut(lic).data)


class FleetApi(APIView):
    def get(self, request):
        query = _valid(serializers.FleetQuery, request.query_params)
        weak = query.pop("weak_binding", None)
        if weak is not None:
            query["weak_binding"] = weak in ("1", "true")
        units = serializers.ActivationRecordOut(selectors.fleet_list(**query), many=True).data
        return Response(
            {"units": units, "count": len(units), "as_of": int(timezone.now().timestamp())}
        )
