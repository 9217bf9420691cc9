"""``X-Admin-Key`` gate for ``/v1/admin/*``, and the audit actor of every request.

Missing key 401, wrong key 403, no key configured 503; compared in constant time. The
key itself is never logged or echoed. Guessing is not free: every wrong key is recorded
in the audit log (``admin_key.refused``, the address, never the key), and an address
with ``SVC_ADMIN_KEY_FAILURES`` wrong keys in the last 60 s is answered 429 with
``Retry-After``, right key or not, until its window slides on. The 429s are recorded
too, counted: one ``admin_key.throttled`` entry per address and minute.

Besides the bootstrap key ``SVC_ADMIN_KEY`` there are named operator keys
(``manage.py create_admin_key NAME``), stored hashed: this app owns both, and so the
gate.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse

from audit.context import acting_as, request_actor
from audit.models import AuditEntry
from audit.services import (
    audit_count_safely,
    audit_record_safely,
    operator_key_match,
    operator_keys_exist,
)
from config.clientip import client_ip
from config.errors import database_unavailable
from ratelimits import counters

ADMIN_PREFIX = "/v1/admin"
BOOTSTRAP_KEY_NAME = "bootstrap"
FAILURE_WINDOW_SECONDS = 60


def admin_key_name(presented: str) -> str | None:
    """Name of the operator key ``presented`` matches, or None."""
    configured = settings.SVC_ADMIN_KEY
    if configured and hmac.compare_digest(presented.encode(), configured.encode()):
        return BOOTSTRAP_KEY_NAME
    return operator_key_match(presented)


def _admin_api_enabled() -> bool:
    return bool(settings.SVC_ADMIN_KEY) or operator_keys_exist()


def _too_many(limit: int, retry_after: int) -> JsonResponse:
    response = JsonResponse(
        {
            "detail": f"too many wrong X-Admin-Key attempts from this address ({limit} in "
            f"{FAILURE_WINDOW_SECONDS} s); retry in {retry_after} s"
        },
        status=429,
    )
    response["Retry-After"] = str(retry_after)
    return response


def _refused(request, ip: str) -> None:
    """Count a wrong key against ``ip`` and record it (never the key itself)."""
    counters.hit(
        "admin-key", ip, limit=settings.SVC_ADMIN_KEY_FAILURES, span=FAILURE_WINDOW_SECONDS
    )
    with acting_as(request_actor(request, ip or None)):
        audit_record_safely(
            action="admin_key.refused",
            result=AuditEntry.Result.FAILED,
            target=request.path_info[:128],
            detail={"method": request.method},
            message="X-Admin-Key is not valid",
        )


def _gate(request) -> JsonResponse | None:
    """The refusal of an admin request (401, 403, 429), or None with
    ``request.admin_key_name`` set. Reads the database (operator keys, and the failure
    counters without Redis)."""
    if not _admin_api_enabled():
        return JsonResponse(
            {"detail": "the admin API is disabled: set SVC_ADMIN_KEY on the server"}, status=503
        )
    presented = request.headers.get("X-Admin-Key")
    if not presented:
        return JsonResponse({"detail": "X-Admin-Key header required"}, status=401)
    ip = client_ip(request)
    limit = settings.SVC_ADMIN_KEY_FAILURES
    state = counters.peek("admin-key", ip, limit=limit, span=FAILURE_WINDOW_SECONDS)
    if not state.allowed:
        with acting_as(request_actor(request, ip or None)):
            audit_count_safely(
                action="admin_key.throttled",
                target=request.path_info[:128],
                message=f"answered 429: {limit} wrong X-Admin-Key in {FAILURE_WINDOW_SECONDS} s",
            )
        return _too_many(limit, state.retry_after)
    name = admin_key_name(presented)
    if name is None:
        _refused(request, ip)
        return JsonResponse({"detail": "X-Admin-Key is not valid"}, status=403)
    request.admin_key_name = name
    return None


class AdminKeyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path_info
        if path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/"):
            try:
                refusal = _gate(request)
            except (OperationalError, InterfaceError) as exc:
                return database_unavailable(exc)
            if refusal is not None:
                return refusal
        # Whoever acts during this request (API key or staff user) is who the audit log
        # names; resolved lazily, only when an action is recorded.
        with acting_as(request_actor(request, client_ip(request) or None)):
            return self.get_response(request)
