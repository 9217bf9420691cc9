"""The checks behind ``X-Admin-Key``: ``OperatorKeyAuthentication`` (in
:mod:`operators.authentication`) calls :func:`authenticate_operator`; each refusal is a
DRF exception that the API's exception handler turns into ``{"detail"}``."""

from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions, status

from audit.context import note_refusal
from config.clientip import client_ip
from config.errors import RateLimited
from operators.identity import HEADER, Operator
from operators.selectors import admin_api_enabled, admin_key_operator, operator_key_presented
from ratelimits import counters

FAILURE_WINDOW_SECONDS = 60


class AdminApiDisabled(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "the admin API is disabled: set SVC_ADMIN_KEY on the server"


def _refused(request, ip: str, presented: str) -> None:
    """Count a wrong key against ``ip`` and note the refusal for the audit log (never the
    key itself): an expired or revoked key is named, its actor that key."""
    counters.hit(
        "admin-key", ip, limit=settings.SVC_ADMIN_KEY_FAILURES, span=FAILURE_WINDOW_SECONDS
    )
    known = operator_key_presented(presented)
    if known is None:
        note_refusal(request, action="admin_key.refused")
        return
    name, state = known
    note_refusal(
        request,
        action="admin_key.refused",
        actor_name=name,
        actor_kind="api_key",
        key_name=name,
        detail={"key_state": state},
    )


def _throttled(request, limit: int, retry_after: int) -> RateLimited:
    note_refusal(request, action="admin_key.throttled")
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
        note_refusal(request, action="admin_key.missing")
        raise exceptions.NotAuthenticated(f"{HEADER} header required")
    ip = client_ip(request)
    limit = settings.SVC_ADMIN_KEY_FAILURES
    state = counters.peek("admin-key", ip, limit=limit, span=FAILURE_WINDOW_SECONDS)
    if not state.allowed:
        raise _throttled(request, limit, state.retry_after)
    operator = admin_key_operator(presented)
    if operator is None:
        _refused(request, ip, presented)
        raise exceptions.PermissionDenied(f"{HEADER} is not valid")
    request.admin_key_name = operator.key_name
    return operator
