"""Domain errors and the one place they become HTTP responses.

Services raise :class:`ServiceError` subclasses with a message written for an operator
(naming the ids and numbers needed to act). Views never catch them; the DRF exception
handler below turns every error into ``{"detail": "..."}``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler


class ServiceError(Exception):
    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidInput(ServiceError):
    status_code = status.HTTP_400_BAD_REQUEST


class PaymentRequired(ServiceError):
    status_code = status.HTTP_402_PAYMENT_REQUIRED


class Forbidden(ServiceError):
    status_code = status.HTTP_403_FORBIDDEN


class Unauthorized(ServiceError):
    status_code = status.HTTP_401_UNAUTHORIZED


class NotFound(ServiceError):
    status_code = status.HTTP_404_NOT_FOUND


class Conflict(ServiceError):
    status_code = status.HTTP_409_CONFLICT


class MisconfiguredService(ServiceError):
    """The service's own data or configuration is wrong (500): not the caller's fault."""

    status_code = status.HTTP_500_INTERNAL_SERVER_ERROR


def _flatten(data: Any, prefix: str = "") -> list[str]:
    if isinstance(data, dict):
        out: list[str] = []
        for key, value in data.items():
            name = "" if key in ("non_field_errors", "detail") else str(key)
            out += _flatten(value, f"{prefix}.{name}" if prefix and name else prefix or name)
        return out
    if isinstance(data, list):
        out = []
        for index, value in enumerate(data):
            if isinstance(value, dict | list):
                out += _flatten(value, f"{prefix}[{index}]")
            else:
                out += _flatten(value, prefix)
        return out
    return [f"{prefix}: {data}" if prefix else str(data)]


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, ServiceError):
        return Response({"detail": exc.detail}, status=exc.status_code)
    if isinstance(exc, ImproperlyConfigured):
        return Response(
            {"detail": f"service misconfigured: {exc}"},
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    response = exception_handler(exc, context)
    if response is None:
        return None  # unexpected: Django's handler500 answers (config.views.server_error)
    if isinstance(exc, exceptions.ParseError):
        response.data = {"detail": f"request body is not valid JSON: {exc.detail}"}
    elif not (isinstance(response.data, dict) and set(response.data) == {"detail"}):
        response.data = {"detail": "; ".join(_flatten(response.data))}
    return response
