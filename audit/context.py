"""Who is acting right now: a context variable set by the surface the action came in
through (the admin-key middleware, the Django admin, a management command) and read by
:func:`audit.services.audited` when it records the action; and what a refusal point
notes on its request for the log (:func:`note_refusal`, recorded by
:mod:`audit.refusals`). Free of database access, so the DRF authentication and
permission classes (imported with DRF's settings) may import it."""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from config.clientip import client_ip


@dataclass(frozen=True)
class Actor:
    name: str
    kind: str  # one of audit.models.AuditEntry.ActorKind
    ip: str | None = None


# The request attribute holding what a refusal point noted (:func:`note_refusal`).
NOTE = "_audit_refusal"

# An Actor, or a callable producing one: the request's user is resolved only when an
# action is actually recorded, so ordinary page views never touch the session for it.
_current: ContextVar[Actor | Callable[[], Actor] | None] = ContextVar("audit_actor", default=None)


def _os_user() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in a bare container
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def current_actor() -> Actor:
    value = _current.get()
    if value is None:
        return Actor(name=_os_user(), kind="system")
    return value() if callable(value) else value


@contextmanager
def acting_as(actor: Actor | Callable[[], Actor]) -> Iterator[None]:
    token = _current.set(actor)
    try:
        yield
    finally:
        _current.reset(token)


@contextmanager
def acting_from_cli() -> Iterator[None]:
    """For management commands: the operating-system user on this host."""
    with acting_as(Actor(name=_os_user(), kind="cli")):
        yield


def request_actor(request) -> Callable[[], Actor]:
    """The actor behind an HTTP request: its operator API key, else its logged-in user
    (staff, superuser, or a customer's portal user); with the request's client address.
    Both are worked out only when an action is recorded."""

    def resolve() -> Actor:
        ip = client_ip(request) or None
        key_name = getattr(request, "admin_key_name", None)
        if key_name:
            return Actor(name=key_name, kind="api_key", ip=ip)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            # A superuser holds every permission whatever its roles (break-glass): the
            # log says so on each of its actions.
            # A customer's portal user is never staff.
            kind = "superuser" if user.is_superuser else "staff" if user.is_staff else "customer"
            return Actor(name=user.get_username(), kind=kind, ip=ip)
        return Actor(name="anonymous", kind="system", ip=ip)

    return resolve


def invited_actor(account) -> Actor | None:
    """A portal account that just accepted its invitation, as the actor of that action
    (the request was anonymous until then), from the current request's address."""
    if account is None:
        return None
    return Actor(name=account.user.get_username(), kind="customer", ip=current_actor().ip)


def _http(request):
    return getattr(request, "_request", request)  # a DRF request wraps Django's


def note_refusal(request, **fields: Any) -> None:
    """Note on ``request`` (Django's or DRF's) what the refusal it may be answered is:
    ``action``, ``key_name`` (a string, or a callable worked out only if the request is
    refused), ``capability``, ``actor_name`` and ``actor_kind``, ``detail``, ``target``,
    or ``recorded=True`` when the caller recorded it itself. Later notes add to earlier."""
    http = _http(request)
    note = getattr(http, NOTE, None)
    if note is None:
        note = {}
        setattr(http, NOTE, note)
    note.update(fields)
