"""``Authorization: Bearer svccu_...``: the customer API's authentication (read-only
keys a customer creates in the portal) and its permission.

Every refusal is in the audit log (``customer_key.*``, result "refused"): the actor a
key's customer (kind ``customer_key``), the key named ``<name> (<prefix>)`` even when
revoked or its owner deactivated (:func:`key_label`).

A missing key is 401, a wrong or revoked one 403 (compared in constant time; an address
with ``SVC_ADMIN_KEY_FAILURES`` wrong keys in 60 s gets 429, as for operator keys).
Each key has its own rate limit, ``SVC_CUSTOMER_API_RATE`` requests a minute (429 with
``Retry-After``). ``request.user`` is the :class:`CustomerPrincipal`: every view reads
its customer from there, never from the request."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from audit.context import note_refusal
from config import clock
from config.clientip import client_ip
from config.errors import RateLimited
from customers.models import Customer
from ratelimits import counters

WINDOW_SECONDS = 60


@dataclass(frozen=True)
class CustomerPrincipal:
    customer: Customer
    key_prefix: str
    write: bool = False
    is_authenticated = True

    def __str__(self) -> str:
        return f"customer key {self.key_prefix} ({self.customer.pk})"


def key_label(row) -> str:
    """How the audit log names a customer key: its name and prefix (names repeat)."""
    return f"{row.name} ({row.prefix})"


def _note_presented(request, presented: str) -> None:
    """Note a refused key for the audit log: the key it is (whatever its state), when
    its digest matches; never the key itself."""
    from portal.models import CustomerApiKey
    from portal.selectors import PRESENTED, customer_key_digest

    match = PRESENTED.match(presented)
    row = None
    if match:
        row = CustomerApiKey.objects.filter(prefix=match.group(1)).first()
    if row is None or not hmac.compare_digest(row.digest, customer_key_digest(presented)):
        note_refusal(request, action="customer_key.refused")
        return
    state = "revoked" if row.revoked_at is not None else "owner deactivated"
    note_refusal(
        request,
        action="customer_key.refused",
        actor_name=row.customer_id,
        actor_kind="customer_key",
        key_name=key_label(row),
        detail={"key_state": state},
    )


class CustomerKeyAuthentication(BaseAuthentication):
    def authenticate(self, request):
        from portal.models import CustomerApiKey
        from portal.selectors import customer_key_match

        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            note_refusal(request, action="customer_key.missing")
            raise exceptions.NotAuthenticated("Authorization: Bearer <customer API key> required")
        ip = client_ip(request._request)
        limit = settings.SVC_ADMIN_KEY_FAILURES
        state = counters.peek("customer-key", ip, limit=limit, span=WINDOW_SECONDS)
        if not state.allowed:
            note_refusal(request, action="customer_key.throttled")
            raise RateLimited(
                state.retry_after,
                f"too many wrong customer API keys from this address ({limit} in "
                f"{WINDOW_SECONDS} s); retry in {state.retry_after} s",
            )
        row = customer_key_match(presented.strip())
        if row is None:
            counters.hit("customer-key", ip, limit=limit, span=WINDOW_SECONDS)
            _note_presented(request, presented.strip())
            raise exceptions.PermissionDenied("the customer API key is not valid or was revoked")
        note_refusal(
            request, actor_name=row.customer_id, actor_kind="customer_key", key_name=key_label(row)
        )
        rate = settings.SVC_CUSTOMER_API_RATE
        decision = counters.hit("customer-api", row.prefix, limit=rate, span=WINDOW_SECONDS)
        if not decision.allowed:
            note_refusal(request, action="customer_key.rate_limited")
            raise RateLimited(
                decision.retry_after,
                f"this key's limit is {rate} requests a minute (SVC_CUSTOMER_API_RATE); "
                f"retry in {decision.retry_after} s",
            )
        now = clock.now()
        if row.last_used_at is None or (now - row.last_used_at).total_seconds() > WINDOW_SECONDS:
            CustomerApiKey.objects.filter(pk=row.pk).update(last_used_at=now)
        principal = CustomerPrincipal(customer=row.customer, key_prefix=row.prefix, write=row.write)
        return principal, row.prefix

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="customer API"'


class IsWritingCustomer(BasePermission):
    """A customer key made with write access (``CustomerApiKey.write``): the only keys
    that may upload air-gapped cameras' files, which take seats (issue 44)."""

    message = "this customer API key is read-only; create a key with write access"

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, CustomerPrincipal) and request.user.write


class IsCustomer(BasePermission):
    """Only a request :class:`CustomerKeyAuthentication` let in. The views define only
    ``get``: any other method is 405, so a key reads and never writes."""

    message = "a customer API key is required"

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, CustomerPrincipal)


class CustomerKeySchema(OpenApiAuthenticationExtension):
    target_class = CustomerKeyAuthentication
    name = "CustomerKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A customer's read-only key (created in the portal) for "
            "/v1/customer/*: missing 401, wrong or revoked 403; SVC_CUSTOMER_API_RATE "
            "requests a minute per key (429 with Retry-After).",
        }
