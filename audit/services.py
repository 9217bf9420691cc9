"""Writes of the audit app: recording operator actions.

Every operator action goes through a service decorated with :func:`audited`, whichever
surface called it (the /v1/admin API, ``svcctl`` through that API, the Django admin or a
management command), so the log cannot miss an action one surface forgot to record.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction

from audit.context import current_actor
from audit.models import AuditEntry
from config import clock
from config.errors import ServiceError

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

# Arguments that name what an action is about, in order of preference.
_TARGET_ARGS = ("license_id", "batch_id", "customer_id", "id", "name")
MESSAGE_MAX = 2000


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _target_of(result: Any, arguments: dict[str, Any]) -> str:
    if result is not None:
        number = getattr(result, "number", None)  # an invoice is known by its number
        if number:
            return str(number)
        pk = getattr(result, "pk", None)
        if pk is not None:
            return str(pk)
        if isinstance(result, dict):
            for name in ("invoice_id", "id", "number"):
                if result.get(name):
                    return str(result[name])
    for name in _TARGET_ARGS:
        if arguments.get(name):
            return str(arguments[name])
    return ""


def audit_record(
    *,
    action: str,
    result: str,
    target: str = "",
    detail: dict[str, Any] | None = None,
    message: str = "",
) -> AuditEntry:
    """Record one action by the current actor (see :mod:`audit.context`)."""
    actor = current_actor()
    return AuditEntry.objects.create(
        at=clock.now(),
        actor=actor.name[:150],
        actor_kind=actor.kind,
        ip=actor.ip or None,
        action=action,
        target=target[:128],
        detail=_plain(detail or {}),
        result=result,
        message=message[:MESSAGE_MAX],
    )


def audit_record_safely(**fields: Any) -> None:
    """:func:`audit_record` in its own transaction, never raising: the entry must never
    turn a completed action into an error, nor hide the original exception of a failed
    one (a failure to record is logged)."""
    try:
        with transaction.atomic():
            audit_record(**fields)
    except Exception:
        log.exception("could not record audit entry %s", fields.get("action"))


def audit_count_safely(*, action: str, target: str = "", message: str = "") -> None:
    """Record a refusal that may come in floods (an address retrying past its limit) as
    one entry per address and minute whose ``detail.count`` counts them: nothing is
    dropped, and a flood cannot grow the log faster than a row a minute. Never raises."""
    actor = current_actor()
    now = clock.now()
    minute = now.replace(second=0, microsecond=0)
    try:
        with transaction.atomic():
            entry = (
                AuditEntry.objects.select_for_update()
                .filter(action=action, ip=actor.ip or None, at__gte=minute)
                .order_by("-at")
                .first()
            )
            if entry is None:
                detail = {"count": 1, "minute": minute.isoformat()}
                audit_record(
                    action=action,
                    result=AuditEntry.Result.FAILED,
                    target=target,
                    detail=detail,
                    message=message,
                )
            else:
                count = entry.detail.get("count", 1) if isinstance(entry.detail, dict) else 1
                entry.detail = {**entry.detail, "count": int(count) + 1, "last": now.isoformat()}
                entry.save(update_fields=["detail"])
    except Exception:
        log.exception("could not record audit entry %s", action)


def audited(
    action: str,
    *,
    target: Callable[[Any, dict[str, Any]], str] | None = None,
    detail: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None,
) -> Callable[[F], F]:
    """Record every call of a service as an audit entry named ``action``.

    Put it above ``@transaction.atomic``: the service's transaction has then committed
    (or rolled back) before the entry is written, so a failed action is still recorded
    with the error message the operator saw, and a successful one only once it stuck.
    ``detail`` makes a successful entry's detail from the result and the arguments
    (default: the arguments), e.g. an edit's values before and after.
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            arguments = dict(kwargs)
            if args:
                arguments["args"] = list(args)
            try:
                result = func(*args, **kwargs)
            except ServiceError as exc:
                audit_record_safely(
                    action=action,
                    result=AuditEntry.Result.FAILED,
                    target=_target_of(None, arguments),
                    detail=arguments,
                    message=exc.detail,
                )
                raise
            except Exception as exc:
                audit_record_safely(
                    action=action,
                    result=AuditEntry.Result.FAILED,
                    target=_target_of(None, arguments),
                    detail=arguments,
                    message=f"internal error: {type(exc).__name__}",
                )
                raise
            name = target(result, arguments) if target else _target_of(result, arguments)
            audit_record_safely(
                action=action,
                result=AuditEntry.Result.OK,
                target=name,
                detail=detail(result, arguments) if detail else arguments,
            )
            return result

        wrapper.audit_action = action  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


# --- named operator keys -------------------------------------------------------------
