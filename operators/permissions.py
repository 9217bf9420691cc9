"""The admin API's permission: an operator authenticated by ``X-Admin-Key``."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from operators.authentication import Operator


class IsOperator(BasePermission):
    """Only a request :class:`operators.authentication.OperatorKeyAuthentication` let in:
    a view that drops the authentication but keeps this permission stays closed."""

    message = "an operator key (X-Admin-Key) is required"

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, Operator)
