"""The /v1 endpoints cameras call (``licensing.device_urls``, served by the full and the
device application): activation, the revocation list and a licence's status on it, and
the refresh of a licence a device holds. One view per operation: parse, call one
service, render. Errors are raised, never caught here."""

from __future__ import annotations

import math
import re

from django.conf import settings
from django.http import HttpResponse, HttpResponseNotModified
from django.utils.http import parse_etags
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response

from audit.refusals import device_of, note_device
from config import metrics
from config.api import schema
from config.api.fields import rendered, validated
from config.api.views import DeviceApi
from config.clientip import client_ip
from config.clock import now
from config.errors import InvalidInput, RateLimited, ServiceError
from licensing import revocations, serializers, services, status_store
from licensing.throttling import ActivationRateThrottle
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
                    409: "A trial batch, and this device already had its trial of the SKU on "
                    "another batch: the body's code is TRIAL_USED (issue 42).",
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


def _status_headers(response: HttpResponse, status: status_store.StoredStatus) -> HttpResponse:
    """What lets nginx, a CDN and the device keep the answer: its ETag (the document's
    hash) and a max-age that never reaches past the document's window."""
    response["ETag"] = status.etag
    max_age = status.max_age(int(now().timestamp()))
    response["Cache-Control"] = f"public, max-age={max_age}" if max_age else "no-cache"
    return response


class RevocationStatusApi(DeviceApi):
    """``GET /v1/revocations/status?license_id=...&device_id=...``: the list's signed word
    on one licence, what the device module fetches at every sync; made once per window
    or change (:mod:`licensing.status_store`), cacheable, 304 for the status held."""

    @extend_schema(
        parameters=[
            serializers.LicenseStatusQuery,
            OpenApiParameter(
                "If-None-Match",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="The ETag of the status the device holds (the hash of its "
                "document, devices.documents.status_etag): 304 when it is the current one.",
            ),
            OpenApiParameter(
                "ETag",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="The hash of the signed document; send it back in If-None-Match.",
                response=[200, 304],
            ),
            OpenApiParameter(
                "Cache-Control",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="public, max-age=N: N at most SVC_STATUS_MAX_AGE and never past "
                "the document's window; no-cache when SVC_STATUS_MAX_AGE is 0.",
                response=[200, 304],
            ),
            schema.retry_after(503),
        ],
        responses={
            200: OpenApiResponse(
                serializers.LicenseStatusOut,
                description="Signed once per window (SVC_STATUS_WINDOW_SECONDS) or change of "
                "what it says, and stored: a few hundred bytes whatever the list holds.",
            ),
            304: OpenApiResponse(
                description="Not modified: If-None-Match names the current status. The "
                "device keeps the status it holds, and what that status says."
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
        "list's sequence number and the signing time. Public like the list, and cacheable "
        "by any shared cache (the URL names the licence and device, no secret).",
    )
    def get(self, request):
        query = validated(serializers.LicenseStatusQuery, request.query_params.dict())
        status = status_store.status_current(**query)
        # The unit was seen (issue 42): only its own licence and device move its time
        # (the request is public); no query when this process wrote it recently. An
        # answer a cache gives never gets here: last seen is as fine as max-age.
        services.unit_seen(license_id=query["license_id"], device_id=query["device_id"])
        if _matches(request.headers.get("If-None-Match"), status.etag):
            return _status_headers(HttpResponseNotModified(), status)
        response = Response(rendered(serializers.LicenseStatusOut, status.answer()))
        return _status_headers(response, status)


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
            OpenApiParameter(
                "components",
                str,
                required=False,
                description="Issue 45 (optional): the device's identity components as "
                "name=sha256hex pairs separated by commas. A set that changed but meets the "
                "licence's policy rebinds it (to a new device_id too): answered 200 with "
                "the re-signed token.",
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
        "this call), after an add-on was added or removed the token re-signed with its "
        "add-ons (same end; a unit of the batch is re-signed on this call), otherwise 304. "
        "A token a renewal or an add-on replaced still authenticates.",
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
            components=request.query_params.get("components"),
            client_ip=client_ip(request) or None,
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
