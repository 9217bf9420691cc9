"""The checks behind ``X-Admin-Key``: ``OperatorKeyAuthentication`` (in
:mod:`operators.authentication`) calls :func:`authenticate_operator`; each refusal is a
DRF exception that the API's exception handler turns into ``{"detail"}``."""

from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions, status

from audit.context import acting_as, request_actor
from audit.models import AuditEntry
from audit.services import audit_count_safely, audit_record_safely
from config.clientip import client_ip
from config.errors import RateLimited
from operators.authentication import HEADER, Operator
from operators.selectors import admin_api_enabled, admin_key_operator
from ratelimits import counters

FAILURE_WINDOW_SECONDS = 60


class AdminApiDisabled(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "the admin API is disabled: set SVC_ADMIN_KEY on the server"


def _target(request) -> str:
    return request.path_info[:128]


def _refused(request, ip: str) -> None:
    """Count a wrong key against ``ip`` and record it (never the key itself)."""
    counters.hit(
        "admin-key", ip, limit=settings.SVC_ADMIN_KEY_FAILURES, span=FAILURE_WINDOW_SECONDS
    )
    with acting_as(request_actor(request)):
        audit_record_safely(
            action="admin_key.refused",
            result=AuditEntry.Result.FAILED,
            target=_target(request),
            detail={"method": request.method},
            message=f"{HEADER} is not valid",
        )


def _throttled(request, ip: str, limit: int, retry_after: int) -> RateLimited:
    with acting_as(request_actor(request)):
        audit_count_safely(
            action="admin_key.throttled",
            target=_target(request),
            message=f"answered 429: {limit} wrong {HEADER} in {FAILURE_WINDOW_SECONDS} s",
        )
    return RateLimited(
        retry_after,
        f"too many wrong {HEADER} attempts from this address ({limit} in "
        f"{FAILURE_WINDOW_SECONDS} s); retry in {retry_after} s",
    )


def authenticate_operator(request) -> Operator:
    """The operator behind a Django ``request``, or the refusal raised as a DRF
    exception (401, 403, 429, 503). Sets ``request.admin_key_name``, which the audit log
    names as the actor. Reads the database (operator keys, and the failure counters
    without Redis)."""
    if not admin_api_enabled():
        raise AdminApiDisabled()
    presented = request.headers.get(HEADER)
    if not presented:
        raise exceptions.NotAuthenticated(f"{HEADER} header required")
    ip = client_ip(request)
    limit = settings.SVC_ADMIN_KEY_FAILURES
    state = counters.peek("admin-key", ip, limit=limit, span=FAILURE_WINDOW_SECONDS)
    if not state.allowed:
        raise _throttled(request, ip, limit, state.retry_after)
    operator = admin_key_operator(presented)
    if operator is None:
        _refused(request, ip)
        raise exceptions.PermissionDenied(f"{HEADER} is not valid")
    request.admin_key_name = operator.key_name
    return operator
