"""``X-Admin-Key``: the DRF authentication of the admin API.

It is the default authentication class of every DRF view (``REST_FRAMEWORK`` in
settings), with :class:`operators.permissions.IsOperator` as the default permission, so
a view is an operator's unless it says otherwise: the device endpoints declare
``authentication_classes = ()`` and ``AllowAny`` in plain sight
(``config.api.views.DeviceApi``).

The checks themselves (:func:`operators.gate.authenticate_operator`): missing key 401,
wrong key 403, no key configured 503; compared in constant time. The key itself is never
logged or echoed. Guessing is not free: every wrong key is a refusal in the audit log
(``admin_key.refused``, the address, never the key; an expired or revoked key named),
and an address with ``SVC_ADMIN_KEY_FAILURES`` wrong keys in the last 60 s is answered
429 with ``Retry-After``, right key or not, until its window slides on
(``admin_key.throttled``). Identical refusals of a clock minute are one row counting
them (:func:`audit.services.audit_refusal`).
"""

from __future__ import annotations

from rest_framework.authentication import BaseAuthentication

from operators.identity import HEADER


class OperatorKeyAuthentication(BaseAuthentication):
    """DRF authentication by ``X-Admin-Key``: the bootstrap ``SVC_ADMIN_KEY`` or a named
    operator key (``manage.py create_admin_key NAME``)."""

    def authenticate(self, request):
        # DRF imports this class (the default in settings) while rest_framework.views is
        # itself being imported; the gate imports what imports those views, so it is
        # imported here, at the first request, not at the top.
        from operators.gate import authenticate_operator

        operator = authenticate_operator(request._request)
        return operator, operator.key_name

    def authenticate_header(self, request) -> str:
        # Makes a missing key a 401 (DRF answers 403 without a challenge).
        return HEADER
