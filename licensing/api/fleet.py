"""The /v1/admin endpoints that read the fleet: its activation records (a page, or all
of them as CSV) and the terms ending soon."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from config import clock
from config.api import schema
from config.api.fields import rendered, validated
from licensing import exports, selectors, serializers
from operators.permissions import requires
from svccore.timeunits import unix


class FleetApi(APIView):
    @extend_schema(
        parameters=[serializers.FleetQuery, schema.retry_after(429, 503)],
        responses={
            200: serializers.FleetOut,
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.QUERY_ERRORS[400]} Or a cursor the service did not give "
                    "(edited, or made under another SVC_SECRET_KEY), or cursor with before.",
                    404: "customer_id or batch_id names no customer or batch.",
                }
            ),
        },
        description="Activation records, most recent first (activated_at, then activation "
        "id), at most limit (default and at most 1000). next_cursor, passed back as cursor, "
        "pages on with none skipped or repeated; before (whole Unix seconds) also pages "
        "back but skips the rest of a second a page ends in. A cursor that is not one "
        "next_cursor gave, or cursor with before, is 400.",
    )
    @requires("view_service")
    def get(self, request):
        # A plain dict: a filter present but blank (``?customer_id=``) is refused like any
        # other bad value, not taken as absent (DRF's reading of a QueryDict), which would
        # list every customer's units.
        query = validated(serializers.FleetQuery, request.query_params.dict())
        weak = query.pop("weak_binding", None)
        if weak is not None:
            query["weak_binding"] = weak in ("1", "true")
        page = selectors.fleet_page(**query)
        answer = {
            "units": page.units,
            "count": len(page.units),
            "next_cursor": page.next_cursor,
            "as_of": unix(clock.now()),
        }
        return Response(rendered(serializers.FleetOut, answer))


class _JsonErrors(BaseContentNegotiation):
    """The export answers CSV whatever the client accepts, and its errors JSON."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class FleetCsvApi(APIView):
    content_negotiation_class = _JsonErrors

    @extend_schema(
        parameters=[serializers.FleetExportQuery, schema.retry_after(429, 503)],
        responses={
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR,
                description="UTF-8 CSV with a byte-order mark and a header row: "
                + ", ".join(exports.COLUMNS),
            ),
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    400: schema.QUERY_ERRORS[400],
                    404: "customer_id or batch_id names no customer or batch.",
                }
            ),
        },
        description="Every activated unit the filters select (the whole fleet without "
        "any), most recent first, as CSV with the fields of GET /v1/admin/fleet; streamed "
        "a page of 1000 at a time along the fleet's cursor, so it takes constant memory "
        "on the server whatever the size of the fleet.",
    )
    @requires("view_service")
    def get(self, request):
        query = validated(serializers.FleetExportQuery, request.query_params.dict())
        weak = query.pop("weak_binding", None)
        if weak is not None:
            query["weak_binding"] = weak in ("1", "true")
        # Before the stream starts: a refusal mid-stream could not be a 404.
        selectors.filters_check(
            customer_id=query.get("customer_id"), batch_id=query.get("batch_id")
        )
        response = StreamingHttpResponse(
            exports.fleet_csv(**query), content_type="text/csv; charset=utf-8"
        )
        scope = query.get("batch_id") or query.get("customer_id") or "all"
        stamp = clock.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="fleet-{scope}-{stamp}.csv"'
        return response


class ExpiringApi(APIView):
    @extend_schema(
        parameters=[serializers.ExpiringQuery, schema.retry_after(429, 503)],
        responses={
            200: serializers.ExpiringListOut,
            **schema.errors({**schema.ADMIN_ERRORS, 400: schema.QUERY_ERRORS[400]}),
        },
        description="Batches and direct licences, not revoked, ending within days (default "
        "30) or ended and still in their grace period, soonest first, with their customer "
        "and activated units: what to renew.",
    )
    @requires("view_service")
    def get(self, request):
        query = validated(serializers.ExpiringQuery, request.query_params.dict())
        items = selectors.expiring_list(days=query["days"])
        listing = {
            "days": query["days"],
            "as_of": int(clock.now().timestamp()),
            "count": len(items),
            "items": items,
        }
        return Response(rendered(serializers.ExpiringListOut, listing))
