"""The /v1 device and admin endpoints of the licensing authority. One view per
operation: parse, call one service, render. Errors are raised, never caught here."""

from __future__ import annotations

import math
import re

from django.conf import settings
from django.http import HttpResponse, HttpResponseNotModified, StreamingHttpResponse
from django.utils.http import parse_etags
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.refusals import device_of, note_device
from config import clock, metrics, schema
from config.api import DeviceApi
from config.clientip import client_ip
from config.errors import InvalidInput, RateLimited, ServiceError
from config.fields import rendered, validated
from licensing import exports, revocations, selectors, serializers, services
from licensing.throttling import ActivationRateThrottle
from operators.permissions import requires
from signing import keyring
from signing.selectors import signed_key_name
from svccore.rates import parse_rate
from svccore.timeunits import unix

_NEW, _REACTIVATED, _REFUSED, _THROTTLED = (
    metrics.ACTIVATIONS.labels(r) for r in ("new", "reactivated", "refused", "throttled")
)


def _body_field(request, name: str):
    data = request.data
    return data.get(name) if isinstance(data, dict) else None


class ActivateApi(DeviceApi):
    throttle_classes = [ActivationRateThrottle]

    def initial(self, request, *args, **kwargs):
        # Its refusals (402, 403, 429) name the device and the batch key's licence.
        note_device(
            request,
            device=lambda: device_of(request.data),
            key_name=lambda: signed_key_name(_body_field(request, "batch_token")),
        )
        super().initial(request, *args, **kwargs)

    def throttled(self, request, wait):
        # DRF calls this before post() runs: the 429 is counted here, not with the rest.
        _THROTTLED.inc()
        limit, span = parse_rate(settings.SVC_ACTIVATION_RATE)
        retry = max(1, math.ceil(wait or span))
        raise RateLimited(
            retry,
            f"activation rate limit exceeded: {limit} requests per {span} s per IP; "
            f"retry in {retry} s",
        )

    @extend_schema(
        request=serializers.ActivateIn,
        responses={
            200: OpenApiResponse(
                serializers.ActivateOut,
                description="The unit licence, new or (reactivated) the one on file.",
            ),
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    400: "device_id missing, blank, over 128 characters or holding a control "
                    "or format character; or another field of the wrong type.",
                    402: "Batch exhausted (the detail names the batch and its counts).",
                    403: "Bad signature, expired, revoked, not-yet-valid or foreign batch key, "
                    "or a revoked unit.",
                    429: "Activation rate limit of this address exceeded; retry after "
                    "Retry-After seconds.",
                    500: "The batch's SKU is missing from the catalogue.",
                    **schema.DATABASE_UNAVAILABLE,
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        auth=schema.NO_AUTH,
        description="Exchange a batch key (the credential, in the body) for a licence bound "
        "to one device.",
    )
    def post(self, request):
        data = validated(serializers.ActivateIn, request.data)
        try:
            result = services.unit_activate(
                **data, client_ip=client_ip(request) or None, positioned=True
            )
        except ServiceError:
            _REFUSED.inc()
            raise
        (_REACTIVATED if result.reactivated else _NEW).inc()
        # A freshly activated device holds a verified list position without a second call,
        # and the certificates that chain the authority's keys to its compiled-in roots:
        # built by the service before it took the seat, so that once the seat is committed
        # the answer is a 200 with the licence whatever the database does next.
        position = result.position
        assert position is not None  # positioned=True
        answer = {
            "unit_token": result.token,
            "license_id": result.license_id,
            "reactivated": result.reactivated,
            "batch_units_remaining": None if result.reactivated else result.batch_units_remaining,
            "revocations": position.revocations,
            "status": position.status,
            "certificates": position.certificates,
        }
        return Response(rendered(serializers.ActivateOut, answer))


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


class RevocationListApi(DeviceApi):
    """``GET /v1/revocations[?since=N]``: served from bytes built once per change of the
    list (plain or gzip), or 304 after a single head read when the device is current."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "since",
                {"type": "integer", "minimum": 0, "maximum": 10**19 - 1},
                description="The sequence number the device holds (at most 19 digits); "
                "absent: the full list of older firmware.",
            ),
            OpenApiParameter(
                "If-None-Match",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="The ETag of the answer the device holds: 304 when unchanged.",
            ),
            OpenApiParameter(
                "ETag",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="Send it back in If-None-Match.",
                response=[200, 304],
            ),
            schema.retry_after(503),
        ],
        responses={
            200: OpenApiResponse(
                serializers.RevocationListOut,
                description="With since: the signed page after it; without: every listed "
                "licence id and the first page. gzip with Accept-Encoding: gzip.",
            ),
            304: OpenApiResponse(description="Not modified: If-None-Match holds the ETag."),
            **schema.errors(
                {
                    400: "since is not a whole number of at most 19 digits.",
                    409: "since is ahead of the list: fetch again with since=0.",
                    **schema.DATABASE_UNAVAILABLE,
                }
            ),
        },
        auth=schema.NO_AUTH,
    )
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


class RevocationStatusApi(DeviceApi):
    """``GET /v1/revocations/status?license_id=...&device_id=...``: the list's signed word
    on one licence, what the device module fetches at every sync."""

    @extend_schema(
        parameters=[serializers.LicenseStatusQuery, schema.retry_after(503)],
        responses={
            200: OpenApiResponse(
                serializers.LicenseStatusOut,
                description="Signed for this request (never cached, never 304): a few "
                "hundred bytes whatever the list holds.",
            ),
            **schema.errors(
                {
                    400: "license_id or device_id missing, blank, too long, or holding a "
                    "control or format character.",
                    **schema.DATABASE_UNAVAILABLE,
                }
            ),
        },
        auth=schema.NO_AUTH,
        description="Whether the licence is revoked as of the list's head (pruned entries "
        "included), with the signing keys revoked by then: a document signed by the "
        "authority (SVCS1, devices/documents.py) naming the licence, the device, the "
        "list's sequence number and the signing time. Public like the list.",
    )
    def get(self, request):
        query = validated(serializers.LicenseStatusQuery, request.query_params.dict())
        response = Response(
            rendered(serializers.LicenseStatusOut, revocations.license_status(**query))
        )
        response["Cache-Control"] = "no-store"
        return response


class CatalogueApi(APIView):
    @extend_schema(
        responses={200: serializers.CatalogueOut, **schema.errors(schema.ADMIN_ERRORS)},
        parameters=[schema.retry_after(429, 503)],
    )
    @requires("view_service")
    def get(self, request):
        skus = [sku.entry() for sku in selectors.catalogue_list()]
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
        "SKU's default term.",
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
                    409: "The batch's release policy is spent for now; the detail says when "
                    "the next release is possible.",
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


# --- renewals (issue 16) ---------------------------------------------------------------


class LicenseRefreshApi(DeviceApi):
    """``GET /v1/license?device_id=...``: the current token of the licence a device
    holds, authenticated by that token; 304 when it is the current one."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "device_id",
                schema.DEVICE_ID_SCHEMA,
                required=True,
                description="The device the presented licence is bound to.",
            ),
            schema.retry_after(503),
        ],
        responses={
            200: serializers.LicenseRefreshOut,
            304: OpenApiResponse(
                description="Not modified: the presented token is the licence's current one."
            ),
            **schema.errors(
                {
                    400: "device_id missing, blank, too long or holding a control or format "
                    "character.",
                    401: "Bearer token missing or not verifying.",
                    403: "A batch key, a token bound to another device, a licence not on "
                    "file, a token this authority did not issue, or a revoked licence.",
                    **schema.DATABASE_UNAVAILABLE,
                }
            ),
        },
        auth=schema.UNIT_TOKEN_AUTH,
        description="The device module's sync asks this with the licence it holds (unit, "
        "direct or offline), as Authorization: Bearer <token>: after a renewal it receives "
        "the renewed token (a unit of a renewed batch is re-signed to the batch's end on "
        "this call), otherwise 304. A token a renewal replaced still authenticates.",
    )
    def get(self, request):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        note_device(
            request,
            device=lambda: device_of(request.query_params),
            key_name=lambda: signed_key_name(token.strip() if scheme.lower() == "bearer" else None),
        )
        result = services.license_refresh(
            token=token.strip() if scheme.lower() == "bearer" else None,
            device_id=request.query_params.get("device_id"),
        )
        if not result.changed:
            return HttpResponseNotModified()
        answer = {
            "license_id": result.license_id,
            "token": result.token,
            "expires_at": unix(result.expires_at),
            "certificates": keyring.certificates(),
        }
        return Response(rendered(serializers.LicenseRefreshOut, answer))


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
                    "or a term that would end in the past or after 9999.",
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
