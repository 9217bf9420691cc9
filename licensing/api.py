"""The /v1 device and admin endpoints of the licensing authority. One view per
operation: parse, call one service, render. Errors are raised, never caught here."""

from __future__ import annotations

import re

from django.conf import settings
from django.http import HttpResponse, HttpResponseNotModified
from django.utils import timezone
from django.utils.http import parse_etags
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from config.errors import InvalidInput
from config.fields import validated
from licensing import activation, revocations, selectors, serializers, services, signing
from licensing.throttling import ActivationRateThrottle, client_ip, parse_rate


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
        data = validated(serializers.ActivateIn, request.data)
        result = activation.unit_activate(**data, client_ip=client_ip(request) or None)
        body = {
            "unit_token": result.token,
            "license_id": result.license_id,
            "reactivated": result.reactivated,
        }
        if not result.reactivated:
            body["batch_units_remaining"] = result.batch_units_remaining
        # A freshly activated device holds a verified list position without a second call,
        # and the certificates that chain the authority's keys to its compiled-in roots.
        body["revocations"] = revocations.head_document()
        body["certificates"] = signing.certificates()
        return Response(body)


_SINCE = re.compile(r"[0-9]{1,19}")


def _since(value: str | None) -> int | None:
    if value is None:
        return None
    if not _SINCE.fullmatch(value):
        raise InvalidInput(
            f"since must be a revocation-list sequence number (a whole number >= 0), "
            f"not {value[:40]!r}"
        )
    return int(value)


def _accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` header admits gzip (``q=0`` refuses a coding)."""
    weights: dict[str, float] = {}
    for item in header.split(","):
        coding, *params = item.split(";")
        weight = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        weights[coding.strip().lower()] = weight
    for coding in ("gzip", "x-gzip", "*"):
        if coding in weights:
            return weights[coding] > 0
    return False


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = parse_etags(if_none_match)
    return "*" in tags or etag in {tag.removeprefix("W/") for tag in tags}


def _list_headers(response: HttpResponse, etag: str) -> HttpResponse:
    response["ETag"] = etag
    response["Cache-Control"] = "no-cache"
    response["Vary"] = "Accept-Encoding"
    return response


class RevocationListApi(APIView):
    """``GET /v1/revocations[?since=N]``: served from bytes built once per change of the
    list (plain or gzip), or 304 after a single head read when the device is current."""

    def get(self, request):
        since = _since(request.query_params.get("since"))
        head = revocations.head_get()
        if since is None:
            etag = revocations.full_etag(head)
        elif since == head.seq:
            etag = revocations.page_etag(head)
        else:
            etag = ""
        if etag and _matches(request.headers.get("If-None-Match"), etag):
            return _list_headers(HttpResponseNotModified(), etag)
        zipped = _accepts_gzip(request.headers.get("Accept-Encoding", ""))
        if since is None:
            answer = revocations.revocation_full(head=head, zipped=zipped)
        else:
            answer = revocations.revocation_page(since=since, head=head, zipped=zipped)
        response = HttpResponse(answer.body, content_type="application/json")
        if zipped:
            response["Content-Encoding"] = "gzip"
        return _list_headers(response, answer.etag)


class CatalogueApi(APIView):
    def get(self, request):
        return Response({"skus": [sku.entry() for sku in selectors.catalogue_list()]})


class BatchCreateApi(APIView):
    def post(self, request):
        data = validated(serializers.BatchIn, request.data)
        batch = services.batch_issue(**data)
        return Response(serializers.BatchOut(batch).data, status=status.HTTP_201_CREATED)


class BatchDetailApi(APIView):
    def get(self, request, batch_id: str):
        batch = selectors.batch_get(batch_id=batch_id)
        return Response(serializers.BatchStatusOut(batch).data)


class LicenseCreateApi(APIView):
    def post(self, request):
        data = validated(serializers.LicenseIn, request.data)
        lic = services.license_issue(**data)
        return Response(serializers.LicenseOut(lic).data, status=status.HTTP_201_CREATED)


class LicenseRegisterApi(APIView):
    """``POST /v1/admin/licenses/register``: put an offline-minted licence on file."""

    def post(self, request):
        data = validated(serializers.LicenseRegisterIn, request.data)
        lic = services.license_register(**data)
        return Response(serializers.LicenseRegisterOut(lic).data, status=status.HTTP_201_CREATED)


class RevokeApi(APIView):
    def post(self, request):
        data = validated(serializers.RevokeIn, request.data)
        lic = services.license_revoke(**data)
        return Response(serializers.RevokeOut(lic).data)


class FleetApi(APIView):
    def get(self, request):
        query = validated(serializers.FleetQuery, request.query_params)
        weak = query.pop("weak_binding", None)
        if weak is not None:
            query["weak_binding"] = weak in ("1", "true")
        units = serializers.ActivationRecordOut(selectors.fleet_list(**query), many=True).data
        return Response(
            {"units": units, "count": len(units), "as_of": int(timezone.now().timestamp())}
        )
