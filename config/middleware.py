"""``X-Admin-Key`` gate for ``/v1/admin/*``, and the audit actor of every request.

Missing key 401, wrong key 403, no key configured 503; compared in constant time. The
key itself is never logged or echoed. Besides the bootstrap key ``SVC_ADMIN_KEY`` there
are named operator keys (``manage.py create_admin_key NAME``), stored hashed.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import JsonResponse

from audit.context import acting_as, request_actor
from licensing.throttling import client_ip

ADMIN_PREFIX = "/v1/admin"
BOOTSTRAP_KEY_NAME = "bootstrap"


def admin_key_name(presented: str) -> str | None:
    """Name of the operator key ``presented`` matches, or None."""
    from audit.services import operator_key_match

    configured = settings.SVC_ADMIN_KEY
    if configured and hmac.compare_digest(presented.encode(), configured.encode()):
        return BOOTSTRAP_KEY_NAME
    return operator_key_match(presented)


def _admin_api_enabled() -> bool:
    from audit.services import operator_keys_exist

    return bool(settings.SVC_ADMIN_KEY) or operator_keys_exist()


class AdminKeyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path_info
        if path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/"):
            if not _admin_api_enabled():
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
        # Whoever acts during this request (API key or staff user) is who the audit log
        # names; resolved lazily, only when an action is recorded.
        with acting_as(request_actor(request, client_ip(request) or None)):
            return self.get_response(request)
