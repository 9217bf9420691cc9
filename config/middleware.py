"""``X-Admin-Key`` gate for ``/v1/admin/*``.

Missing key 401, wrong key 403, no key configured 503; compared in constant time. The
key itself is never logged or echoed.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import JsonResponse

ADMIN_PREFIX = "/v1/admin"
BOOTSTRAP_KEY_NAME = "bootstrap"


def admin_key_name(presented: str) -> str | None:
    """Name of the operator key ``presented`` matches, or None."""
    configured = settings.SVC_ADMIN_KEY
    if configured and hmac.compare_digest(presented.encode(), configured.encode()):
        return BOOTSTRAP_KEY_NAME
    return None


class AdminKeyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path_info
        if path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/"):
            if not settings.SVC_ADMIN_KEY:
                return JsonResponse(
                    {"detail": "the admin API is disabled: set SVC_ADMIN_KEY on the server"},
                    status=503,
                )
            presented = request.headers.get("X-Admin-Key")
            if not presented:
                return JsonResponse({"detail": "X-Admin-Key header required"}, status=401)
            name = admin_key_name(presented)
            if name is None:
                return JsonResponse({"detail": "X-Admin-Key is not valid"}, status=403)
            request.admin_key_name = name
        return self.get_response(request)
