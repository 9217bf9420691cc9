"""Refusals on the record: every 401, 402, 403 and 429 the service answers, on any
surface (the admin API, the console, the portal, the customer API, the camera
endpoints), is one refusal in the audit log (:func:`audit.services.audit_refusal`: result
"refused", identical ones of a clock minute counted on one row).

:class:`audit.middleware.AuditActorMiddleware` records it once the response is known
(:func:`record_refused_request`), so no refusal point can forget it. What only the
refusal point knows it notes on the request with :func:`note_refusal`: the action's
name, the key presented (named even when expired or revoked), the permission that was
needed, the actor when it is not the request's user (a camera, a customer key, the
account a locked-out login tried). A point that records its refusal itself notes
``recorded=True``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.urls import Resolver404, resolve

from audit.context import NOTE, Actor, current_actor, note_refusal
from audit.services import audit_refusal
from config.clientip import client_ip
from svccore.claims import device_id_problem

log = logging.getLogger(__name__)

# Where a path belongs, by its start (the first that matches).
SURFACES = (
    ("/v1/admin/", "admin_api"),
    ("/v1/customer/", "customer_api"),
    ("/portal/", "portal"),
    ("/admin/", "console"),
    ("/v1/", "device"),
)
# The action of a refusal nothing noted, after its surface.
REASONS = {401: "unauthenticated", 402: "payment_required", 403: "forbidden", 429: "throttled"}
# The capability a model admin's page needs, by the last part of its URL name (Django
# admin's "<app>_<model>_<view>"): its ``<verb>_capability``; a GET of a change page
# needs only the view one.
CONSOLE_VIEWS = {"changelist": "view", "add": "add", "change": "change", "delete": "delete",
                 "history": "view"}  # fmt: skip
# How config.admin.base.require names the capability a console user lacks.
CAPABILITY_SAID = re.compile(r"lack the permission '([a-z_]+)'")
NOTE_EXCEPTION = "_audit_permission_denied"
# The capability of what no role may do (a model admin's capability None).
NOBODY = "(nobody)"
DETAIL_CHARS = 300


def surface_of(path: str) -> str:
    for start, name in SURFACES:
        if path.startswith(start):
            return name
    return "site"


def console_capability(request) -> str:
    """The capability (``operators.roles.CAPABILITIES``) a refused console page needed:
    the one its refusal named (``config.admin.base.require``), else the one its model
    admin asks for that page (``view_capability``, ``add_capability``,
    ``change_capability``); "" when neither says."""
    said = CAPABILITY_SAID.search(getattr(request, NOTE_EXCEPTION, "") or "")
    if said:
        return said.group(1)
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return ""
    model_admin = getattr(match.func, "model_admin", None)
    view = (match.url_name or "").rpartition("_")[2]
    if model_admin is None or view not in CONSOLE_VIEWS:
        return ""
    verb = CONSOLE_VIEWS[view]
    if verb == "change" and request.method in ("GET", "HEAD"):
        verb = "view"
    name = f"{verb}_capability"
    if not hasattr(model_admin, name):
        return ""
    return getattr(model_admin, name) or NOBODY


def note_exception(request, exception: BaseException) -> None:
    """Keep the message of a view's PermissionDenied: the capability it names."""
    if isinstance(exception, PermissionDenied):
        setattr(request, NOTE_EXCEPTION, str(exception)[:DETAIL_CHARS])


def _said(response) -> str:
    """What the answer said: the ``detail`` of a JSON body, else its reason phrase."""
    status = f"{response.status_code} {response.reason_phrase}"
    if "json" not in response.get("Content-Type", "") or getattr(response, "streaming", False):
        return status
    try:
        detail = json.loads(response.content).get("detail")
    except (ValueError, AttributeError):
        return status
    if not isinstance(detail, str):
        return status
    return f"{status}: {detail[:DETAIL_CHARS]}"


def _value(value: Any) -> Any:
    if callable(value):
        try:
            return value()
        except Exception:
            log.exception("could not work out a refusal's field")
            return ""
    return value


def record_refused_request(request, response) -> None:
    """Record ``response``, a refusal of ``request``, with what was noted on it. Never
    raises."""
    try:
        note = getattr(request, NOTE, None) or {}
        if note.get("recorded"):
            return
        status = response.status_code
        surface = surface_of(request.path)
        actor = current_actor()
        name, kind = _value(note.get("actor_name")), note.get("actor_kind")
        if name or kind:
            actor = Actor(name=str(name or "anonymous"), kind=kind or actor.kind, ip=actor.ip)
        if actor.ip is None:
            actor = Actor(name=actor.name, kind=actor.kind, ip=client_ip(request) or None)
        key_name = _value(note.get("key_name")) or ""
        if not key_name and actor.kind in ("api_key", "customer_key"):
            key_name = actor.name
        capability = note.get("capability") or ""
        if not capability and surface == "console" and status == 403:
            capability = console_capability(request)
        detail = {"method": request.method, **(note.get("detail") or {})}
        audit_refusal(
            action=note.get("action") or f"{surface}.{REASONS.get(status, 'refused')}",
            status=status,
            target=note.get("target") or f"{request.method} {request.path}",
            key_name=str(key_name),
            capability=capability,
            message=_said(response),
            detail=detail,
            actor=actor,
        )
    except Exception:
        log.exception("could not record a refusal of %s", getattr(request, "path", "?"))


def device_of(data: Any, name: str = "device_id") -> str:
    """The device id a camera's request body or query names, or "" (none, or not a
    valid one: a control or format character, too long, is never stored)."""
    try:
        value = data.get(name)
    except Exception:
        return ""
    if not isinstance(value, str) or device_id_problem(value):
        return ""
    return value


def note_device(request, *, device: Callable[[], str], key_name: Callable[[], str]) -> None:
    """Note a camera's request: its refusal names the device (actor kind ``device``) and
    the licence its key or token is (``key_name``: :func:`signing.selectors.signed_key_name`
    of it, the caller's, as audit sits below signing); both worked out only if it is
    refused."""
    note_refusal(
        request,
        actor_name=lambda: device() or "unknown device",
        actor_kind="device",
        key_name=key_name,
    )
