"""The admin API's permission: an operator key whose roles hold the capability the
method declares with :func:`requires`, written on the method itself:

    class RevokeApi(APIView):
        @requires("revoke_licences")
        def post(self, request): ...

A method that declares none is refused to every key (403). A new endpoint is
closed until someone decides who may call it, and ``tests/operators/test_roles.py``
fails until its row is in the matrix."""

from __future__ import annotations

from collections.abc import Callable

from rest_framework.permissions import BasePermission

from audit.context import note_refusal
from operators.identity import Operator
from operators.roles import CAPABILITIES, roles_holding

ATTRIBUTE = "required_capability"


def requires(capability: str) -> Callable:
    """Declare the capability (``operators.roles.CAPABILITIES``) a view method needs."""
    if capability not in CAPABILITIES:
        raise KeyError(f"unknown capability {capability!r}")

    def declare(method: Callable) -> Callable:
        setattr(method, ATTRIBUTE, capability)
        return method

    return declare


def handler_of(view, method: str):
    """``view``'s handler for HTTP ``method`` (HEAD is GET's), or None."""
    name = "get" if method.upper() == "HEAD" else method.lower()
    if name not in view.http_method_names:
        return None
    return getattr(view, name, None)


def required_capability(view, method: str) -> str | None:
    """The capability ``view``'s handler for HTTP ``method`` declares."""
    return getattr(handler_of(view, method), ATTRIBUTE, None)


class IsOperator(BasePermission):
    """Only a request :class:`operators.authentication.OperatorKeyAuthentication` let in
    (a view that drops the authentication but keeps this permission stays closed), with
    a key whose roles hold the capability the method declares."""

    message = "an operator key (X-Admin-Key) is required"

    def has_permission(self, request, view) -> bool:
        operator = request.user
        if not isinstance(operator, Operator):
            return False
        handler = handler_of(view, request.method)
        if handler is None:
            return True  # no such method: the 405 (or the admin 404), to a valid key only
        capability = getattr(handler, ATTRIBUTE, None)
        if capability is None:
            note_refusal(request, action="admin_api.forbidden", capability="(none declared)")
            self.message = (
                f"{request.method} {request.path} declares no permission, so no key may call it"
            )
            return False
        if not operator.may(capability):
            note_refusal(request, action="admin_api.forbidden", capability=capability)
            self.message = (
                f"operator key {operator.key_name!r} lacks the permission {capability!r} "
                f"({CAPABILITIES[capability].lower()}); roles that hold it: "
                f"{', '.join(roles_holding(capability))}"
            )
            return False
        return True
