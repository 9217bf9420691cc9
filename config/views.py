"""The service index and the JSON fallbacks for /v1 (unknown routes, 500s). ``/healthz``
checks the signing key, so it lives with it: :mod:`licensing.health`."""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.views import APIView

from config.errors import database_unavailable_response
from config.middleware import bad_request_response

ADMIN_PREFIX = "/v1/admin"


def index(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        {
            "service": "licensing authority",
            "host": request.get_host(),
            "token_format": "SVC1",
            "endpoints": {
                "activate": "POST /v1/activate",
                "usage": "POST /v1/usage",
                "revocations": "GET /v1/revocations",
                "health": "GET /healthz",
            },
        }
    )


# Exempt from CSRF like the API's views: an unsafe method on an unknown /v1 path would
# otherwise get Django's HTML 403 page instead of this JSON 404.
def _no_endpoint(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"detail": f"no endpoint {request.method} {request.path}"}, status=404)


class _AdminNotFound(APIView):
    """An unknown admin route asks for the operator key first, as every admin view does
    (the default authentication and permission): without a valid key nobody learns
    which admin routes exist. Every method, known or not, ends in the 404."""

    http_method_names: list[str] = []

    def http_method_not_allowed(self, request, *args, **kwargs) -> JsonResponse:
        return _no_endpoint(request)


_admin_not_found = _AdminNotFound.as_view()


@csrf_exempt
def api_not_found(request: HttpRequest, *args, **kwargs) -> HttpResponse:
    path = request.path_info
    if path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/"):
        return _admin_not_found(request, *args, **kwargs)
    return _no_endpoint(request)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 400 (a disallowed ``Host``, a malformed request): ``{detail}`` on the API
    as every other error there; the reason is not echoed (it may quote the header)."""
    return bad_request_response(
        request.path,
        "bad request: the Host header is not one this service answers to, or the request "
        "is malformed",
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500, but 503 with ``Retry-After`` when the error is the database's
    (dropped or unreachable): on console pages as on the API, wherever it was raised (a
    view, or middleware reading the session). Django calls this inside its ``except``."""
    failure = sys.exc_info()[1]
    if isinstance(failure, OperationalError | InterfaceError):
        return database_unavailable_response(request.path, failure)
    if request.path.startswith("/v1/") or request.path == "/healthz":
        return JsonResponse(
            {"detail": "internal error; the service log has the details"}, status=500
        )
    return HttpResponse("Internal server error", status=500, content_type="text/plain")


def device_not_found(request: HttpRequest, *args, **kwargs) -> JsonResponse:
    """The device application's answer to anything but the device API: an unknown /v1
    route as the full application answers it; the console, the admin API and the rest a
    JSON 404 that says where they live (the full application, which the edge routes to
    by path)."""
    path = request.path_info
    if path.startswith("/v1/") and not (
        path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")
    ):
        return _no_endpoint(request)
    return JsonResponse(
        {
            "detail": f"no endpoint {request.method} {request.path} on this node: it serves "
            "the device API (/v1/activate, /v1/usage, /v1/license, /v1/revocations, "
            "/healthz, /metrics); the console and admin API are served by the service's "
            "other pool"
        },
        status=404,
    )
