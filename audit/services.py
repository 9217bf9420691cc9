"""Writes of the audit app: recording operator actions.

Every operator action goes through a service decorated with :func:`audited`, whichever
surface called it (the /v1/admin API, ``svcctl`` through that API, the Django admin or a
management command), so the log cannot miss an action one surface forgot to record.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import IntegrityError, models, transaction

from audit.context import Actor, current_actor
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
    actor: Actor | None = None,
) -> AuditEntry:
    """Record one action by ``actor``, by default the current one (see
    :mod:`audit.context`)."""
    actor = actor or current_actor()
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


# The HTTP statuses that are refusals: recorded whatever answered them
# (:class:`audit.middleware.AuditActorMiddleware`).
REFUSAL_STATUSES = frozenset({401, 402, 403, 429})


def refusal_fingerprint(
    *, actor: Actor, key_name: str, action: str, target: str, status: int | None, minute
) -> str:
    """The identity of a refusal in its clock minute: two refusals with the same one are
    counted on one row."""
    parts = [actor.name, actor.kind, key_name, actor.ip or "", action, target, str(status or "")]
    text = "\x1f".join(parts) + "\x1f" + minute.strftime("%Y-%m-%dT%H:%M")
    return hashlib.sha256(text.encode()).hexdigest()


def audit_refusal(
    *,
    action: str,
    status: int | None,
    target: str = "",
    key_name: str = "",
    capability: str = "",
    message: str = "",
    detail: dict[str, Any] | None = None,
    actor: Actor | None = None,
) -> bool:
    """Record a refusal (result "refused") by ``actor`` (default: the current one), or
    count it on the row of the identical refusal of this clock minute: the same actor,
    actor kind, key name, address, action, target and status. So a flood of any size
    grows the log by one row a minute per distinct refusal, its ``repeats`` counting
    every one; nothing is dropped.

    The count is one ``UPDATE ... SET repeats = repeats + 1`` on the row the unique
    ``fingerprint`` finds, the only column it touches (the log is append-only but for
    that); a first refusal inserts the row, and a worker that loses the race to insert
    it (the unique constraint) counts on the winner's. Correct under any number of
    workers, on SQLite and PostgreSQL. Never raises: a failure to record is logged and
    the refusal answered all the same. Returns whether it was recorded."""
    try:
        actor = actor or current_actor()
        now = clock.now()
        target = target[:128]
        key_name = key_name[:150]
        fingerprint = refusal_fingerprint(
            actor=actor,
            key_name=key_name,
            action=action,
            target=target,
            status=status,
            minute=now.replace(second=0, microsecond=0),
        )
        rows = AuditEntry.objects.filter(fingerprint=fingerprint)
        with transaction.atomic():
            if rows.update(repeats=models.F("repeats") + 1):
                return True
            try:
                with transaction.atomic():
                    AuditEntry.objects.create(
                        at=now,
                        actor=actor.name[:150],
                        actor_kind=actor.kind,
                        ip=actor.ip or None,
                        action=action[:64],
                        target=target,
                        detail=_plain(detail or {}),
                        result=AuditEntry.Result.REFUSED,
                        message=message[:MESSAGE_MAX],
                        key_name=key_name,
                        capability=capability[:64],
                        status=status,
                        fingerprint=fingerprint,
                    )
            except IntegrityError:  # another worker inserted it first: count on it
                if not rows.update(repeats=models.F("repeats") + 1):
                    raise
        return True
    except Exception:
        log.exception("could not record refusal %s", action)
        return False


def _actor_of(actor, result: Any, arguments: dict[str, Any]) -> Actor | None:
    if actor is None:
        return None
    try:
        return actor(result, arguments)
    except Exception:
        log.exception("could not name the actor of an audit entry")
        return None


def audited(
    action: str,
    *,
    target: Callable[[Any, dict[str, Any]], str] | None = None,
    detail: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None,
    actor: Callable[[Any, dict[str, Any]], Actor | None] | None = None,
) -> Callable[[F], F]:
    """Record every call of a service as an audit entry named ``action``.

    Put it above ``@transaction.atomic``: the service's transaction has then committed
    (or rolled back) before the entry is written, so a failed action is still recorded
    with the error message the operator saw, and a successful one only once it stuck.
    ``detail`` makes a successful entry's detail from the result and the arguments
    (default: the arguments), e.g. an edit's values before and after. ``actor`` names a
    successful action's actor from the result when it is not the current one (an
    invitation accepted: the person who accepted it, not an anonymous request).
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
                actor=_actor_of(actor, result, arguments),
            )
            return result

        wrapper.audit_action = action  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


# --- named operator keys -------------------------------------------------------------
