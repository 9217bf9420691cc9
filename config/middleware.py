"""Middleware of the bottom layer: what the proxy in front may claim about a request.

The ``X-Admin-Key`` gate lives with the operator keys it checks, in
:mod:`audit.middleware`.
"""

from __future__ import annotations

from django.conf import settings

from config.clientip import ip_in


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
