"""Middleware of the bottom layer: what the proxy in front may claim about a request.

Who may call the admin API is not middleware: it is the DRF authentication and
permission every view declares (:mod:`operators.authentication`).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from config.clientip import ip_in
from config.errors import with_retry_after


def _is_api(path: str) -> bool:
    return path.startswith("/v1/") or path == "/healthz"


def bad_request_response(path: str, detail: str) -> HttpResponse:
    """A 400 in the shape of the part of the site that was asked: ``{detail}`` on the
    API, plain text on the console."""
    if _is_api(path):
        return JsonResponse({"detail": detail}, status=400)
    return HttpResponse(detail, status=400, content_type="text/plain; charset=utf-8")


class NulByteMiddleware:
    """Refuse a console address (path or query string) holding a NUL character: 400. No
    identifier, search or filter of the console holds one, and PostgreSQL text cannot
    store one, so it would reach a query and fail there (a 500). The API checks every
    field itself and names it (``{detail}``), so it is left alone. Cheap: a prefix test,
    then substring tests."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not _is_api(request.path):
            query = request.META.get("QUERY_STRING", "")
            if "\x00" in request.path or "%00" in query or "\x00" in query:
                return bad_request_response(
                    request.path.replace("\x00", ""),
                    "the address holds a NUL character (%00), which no identifier, search "
                    "or filter of this console contains",
                )
        return self.get_response(request)


class UntrustedForwardingMiddleware:
    """Drop the scheme header (``SVC_PROXY_SSL_HEADER``) from a peer that is not a trusted
    proxy (``SVC_TRUSTED_PROXIES``): a client cannot claim HTTPS it did not use. First in
    the chain, before Django's security middleware reads it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
        if header and header[0] in request.META:
            trusted = settings.SVC_TRUSTED_PROXIES
            if not trusted or not ip_in(request.META.get("REMOTE_ADDR", ""), trusted):
                del request.META[header[0]]
        return self.get_response(request)


class RetryAfterMiddleware:
    """Every 503 carries ``Retry-After`` (config.errors.with_retry_after): those of the
    API's exception handler have their own; this adds the default to any other (``/healthz``
    failing, a view's or a proxy's own 503). Outermost, so it sees every answer."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return with_retry_after(self.get_response(request))
