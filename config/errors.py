"""Domain errors and the one place they become HTTP responses.

Services raise :class:`ServiceError` subclasses with a message written for an operator
(naming the ids and numbers needed to act). Views never catch them; the DRF exception
handler below turns every error into ``{"detail": "..."}``, and so it does with what
the request's own input makes Django or the database raise:

- a body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE``: 413 naming the limit;
- a value the database refuses (``DataError``: a NUL in a text, a number out of its
  column's range): 400;
- the database unreachable or failing (``OperationalError``, ``InterfaceError``): 503
  with ``Retry-After: DB_RETRY_AFTER_SECONDS``; the error itself (hosts, users) only in
  the service log;
- the signing key unreachable (:class:`SignerUnavailable`: a PKCS#11 token unplugged,
  locked or too slow): 503 with ``Retry-After: SIGNER_RETRY_AFTER_SECONDS`` and a
  ``detail`` naming the token and what is wrong (never the PIN);
- any other 503 (:class:`MailUnavailable`, the admin API disabled): ``Retry-After`` from
  the error's ``retry_after`` or :data:`UNAVAILABLE_RETRY_AFTER_SECONDS`
  (:func:`with_retry_after`; ``config.middleware.RetryAfterMiddleware`` adds it to any
  503 answered outside the API's handler, such as ``/healthz``).

Anything else unexpected is Django's 500 (``config.views.server_error``).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, RequestDataTooBig
from django.db import DataError, InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

log = logging.getLogger(__name__)

# How long a client is asked to wait (Retry-After) while the database is unavailable.
DB_RETRY_AFTER_SECONDS = 5
# ... and while the signing key's token is (a process retries the token every second).
SIGNER_RETRY_AFTER_SECONDS = 2
# ... and for any other 503 (an e-mail the mail server did not take, the admin API
# disabled): every 503 the service answers carries Retry-After (config.middleware).
UNAVAILABLE_RETRY_AFTER_SECONDS = 60


class RateLimited(exceptions.Throttled):
    """429 with ``detail`` as given (it names the limit and the wait) and ``Retry-After``:
    DRF's Throttled would append a second, generic sentence about the same wait."""

    def __init__(self, wait: float, detail: str) -> None:
        exceptions.APIException.__init__(self, detail)
        self.wait = max(1, math.ceil(wait))


class ServiceError(Exception):
    status_code = status.HTTP_400_BAD_REQUEST
    # A stable code for clients to branch on, sent beside ``detail`` when set (an
    # addition: a body without one is the plain ``{"detail"}`` it always was).
    code = ""

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


class SignerUnavailable(ServiceError):
    """The signing key cannot sign now (its PKCS#11 token is unplugged, locked or does
    not answer in time): 503 with Retry-After. Raised before anything is committed, so
    the request's transaction rolls back whole; the service reconnects by itself."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    retry_after = SIGNER_RETRY_AFTER_SECONDS


class SigningKeyUnusable(SignerUnavailable):
    """This node's active signing key may not sign (revoked, retired, uncertified, out of
    its certificate's window): 503 with Retry-After and the reason, so the edge sends
    safe-to-repeat requests to another node (deploy/nginx) while /healthz fails too. An
    operator fixes it by pointing the node at a usable key."""


class MailUnavailable(ServiceError):
    """An e-mail the action depends on could not be handed to the mail server: 503
    with Retry-After; the action was rolled back."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    retry_after = UNAVAILABLE_RETRY_AFTER_SECONDS


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


def _body_too_big(context: dict) -> Response:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    request = context.get("request")
    try:
        size = int(request.META["CONTENT_LENGTH"])  # Django raised on this very header
    except (AttributeError, KeyError, TypeError, ValueError):
        detail = f"request body is larger than the {limit} bytes accepted"
    else:
        detail = f"request body is {size} bytes; at most {limit} bytes are accepted"
    return Response({"detail": detail}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)


def _database_error(exc: Exception) -> HttpResponse:
    if isinstance(exc, DataError):
        # psycopg's first line says what was refused ("integer out of range", "...
        # cannot contain NUL (0x00) bytes"); its DETAIL and CONTEXT lines stay here.
        text = str(exc).strip()
        reason = text.splitlines()[0][:200] if text else "refused"
        log.warning("request refused by the database: %s", reason)
        return Response(
            {"detail": f"a value of this request cannot be stored or looked up: {reason}"},
            status=status.HTTP_400_BAD_REQUEST,
        )
    return database_unavailable(exc)


def database_unavailable(exc: BaseException) -> JsonResponse:
    """503 ``{detail}`` with ``Retry-After`` for a database that cannot be reached or
    fails (OperationalError, InterfaceError), the error logged, never shown (it names
    hosts and users). For the API's exception handler, and for /v1 middleware that reads
    the database before a view runs."""
    log.error("database unavailable", exc_info=exc)
    response = JsonResponse(
        {
            "detail": f"database unavailable; retry in {DB_RETRY_AFTER_SECONDS} s "
            "(the service log has the details)"
        },
        status=status.HTTP_503_SERVICE_UNAVAILABLE,
    )
    response["Retry-After"] = str(DB_RETRY_AFTER_SECONDS)
    return response


def database_unavailable_response(path: str, exc: BaseException) -> HttpResponse:
    """:func:`database_unavailable` in the shape of the part of the site asked: JSON on
    the API, plain text on the console, both 503 with ``Retry-After``."""
    if path.startswith("/v1/") or path == "/healthz":
        return database_unavailable(exc)
    log.error("database unavailable", exc_info=exc)
    response = HttpResponse(
        f"The database is unavailable; retry in {DB_RETRY_AFTER_SECONDS} s "
        "(the service log has the details).",
        status=status.HTTP_503_SERVICE_UNAVAILABLE,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(DB_RETRY_AFTER_SECONDS)
    return response


def with_retry_after(response: HttpResponse, exc: BaseException | None = None) -> HttpResponse:
    """A 503 carries ``Retry-After``: the error's own ``retry_after`` (the signer 2 s,
    an e-mail 60 s), else :data:`UNAVAILABLE_RETRY_AFTER_SECONDS`. Other answers as
    they are."""
    if response.status_code == status.HTTP_503_SERVICE_UNAVAILABLE and not response.has_header(
        "Retry-After"
    ):
        seconds = getattr(exc, "retry_after", None) or UNAVAILABLE_RETRY_AFTER_SECONDS
        response["Retry-After"] = str(seconds)
    return response


def api_exception_handler(exc: Exception, context: dict) -> HttpResponse | None:
    response = _api_exception_response(exc, context)
    return response if response is None else with_retry_after(response, exc)


def _api_exception_response(exc: Exception, context: dict) -> HttpResponse | None:
    if isinstance(exc, ServiceError):
        body = {"detail": exc.detail} | ({"code": exc.code} if exc.code else {})
        return Response(body, status=exc.status_code)
    if isinstance(exc, RequestDataTooBig):
        return _body_too_big(context)
    if isinstance(exc, DataError | OperationalError | InterfaceError):
        return _database_error(exc)
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
