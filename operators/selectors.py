"""Reads of operator access: which key a presented ``X-Admin-Key`` is."""

from __future__ import annotations

import hashlib
import hmac
import re

from django.conf import settings
from django.contrib.auth.models import Permission
from django.db.models import Q

from operators.identity import Operator
from operators.models import OperatorKey
from operators.roles import APP_LABEL, EVERY_CAPABILITY

KEY_SCHEME = "svcop"
BOOTSTRAP_KEY_NAME = "bootstrap"
PRESENTED = re.compile(r"\Asvcop_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})\Z")


def key_digest(key: str) -> str:
    """HMAC-SHA256 of a presented key under the service secret (``SVC_SECRET_KEY``): a
    copy of the table alone does not let anyone test guesses offline."""
    return hmac.new(
        settings.SECRET_KEY.encode(), b"operator-key:" + key.encode(), hashlib.sha256
    ).hexdigest()


def operator_key_match(presented: str) -> OperatorKey | None:
    """The active (not revoked, not expired) operator key ``presented`` is, or None."""
    match = PRESENTED.match(presented)
    if not match:
        return None
    row = OperatorKey.objects.filter(prefix=match.group(1), revoked_at__isnull=True).first()
    if row is None or not row.active:
        return None
    if hmac.compare_digest(row.digest, key_digest(presented)):
        return row
    return None


def operator_key_presented(presented: str) -> tuple[str, str] | None:
    """(name, state) of the named key ``presented`` is whatever its state ("revoked",
    "expired", "active"): the audit log names the key of a refused request. None when it
    is no key's (its digest compared in constant time)."""
    match = PRESENTED.match(presented)
    if not match:
        return None
    row = OperatorKey.objects.filter(prefix=match.group(1)).first()
    if row is None or not hmac.compare_digest(row.digest, key_digest(presented)):
        return None
    state = "revoked" if row.revoked_at is not None else "expired" if not row.active else "active"
    return key_log_name(row), state


def operator_keys_exist() -> bool:
    return OperatorKey.objects.filter(revoked_at__isnull=True).exists()


def role_capabilities(roles: list[str]) -> frozenset[str]:
    """The capabilities the roles (Django groups) ``roles`` hold, as the database has
    them."""
    if not roles:
        return frozenset()
    return frozenset(
        Permission.objects.filter(
            group__name__in=roles, content_type__app_label=APP_LABEL
        ).values_list("codename", flat=True)
    )


def user_capabilities(user) -> frozenset[str]:
    """The capabilities (``operators.roles.CAPABILITIES``) a console user holds: every one
    for a superuser, else those of its roles (groups) and those given to it directly."""
    if not user.is_active:
        return frozenset()
    if user.is_superuser:
        return EVERY_CAPABILITY
    prefix = f"{APP_LABEL}."
    return frozenset(
        name.removeprefix(prefix) for name in user.get_all_permissions() if name.startswith(prefix)
    )


def user_permissions_held(user):
    """The permissions (``Permission`` rows) ``user`` holds, through its groups or
    directly; every one for a superuser. What it may grant."""
    if user.is_superuser:
        return Permission.objects.all()
    if not user.is_active:
        return Permission.objects.none()
    return Permission.objects.filter(Q(user=user) | Q(group__user=user)).distinct()


def user_holds_all_of(user, other) -> bool:
    """Whether ``user`` holds at least everything ``other`` holds: a superuser holds
    everything, nobody else holds what a superuser holds, and otherwise every
    permission of ``other`` (through its roles or directly) is ``user``'s too."""
    if user.is_superuser:
        return True
    if other.is_superuser or not user.is_active:
        return False
    return other.get_all_permissions() <= user.get_all_permissions()


def admin_key_operator(presented: str) -> Operator | None:
    """The key ``presented`` is: ``bootstrap`` for ``SVC_ADMIN_KEY`` (every capability),
    else a named operator key with its roles' capabilities; None for neither. Compared in
    constant time."""
    configured = settings.SVC_ADMIN_KEY
    if configured and hmac.compare_digest(presented.encode(), configured.encode()):
        return Operator(BOOTSTRAP_KEY_NAME, EVERY_CAPABILITY)
    row = operator_key_match(presented)
    if row is None:
        return None
    return Operator(key_log_name(row), role_capabilities(row.roles))


def key_log_name(row: OperatorKey) -> str:
    """A named key's name as the audit log shows it: its name, but never the bootstrap
    key's (a key named so before the name was reserved is shown with its prefix)."""
    if row.name.lower() == BOOTSTRAP_KEY_NAME:
        return f"{row.name} (named key {row.prefix})"
    return row.name


def admin_api_enabled() -> bool:
    """Whether any key can open the admin API: the bootstrap key or an active named one."""
    return bool(settings.SVC_ADMIN_KEY) or operator_keys_exist()


def shared_key_warning() -> str:
    """What start-up warns of (``config.wsgi``) in production: the shared bootstrap
    ``SVC_ADMIN_KEY`` still set beside named keys. "" when there is nothing to say."""
    if settings.DEBUG or not settings.SVC_ADMIN_KEY:
        return ""
    named = OperatorKey.objects.filter(revoked_at__isnull=True).count()
    if not named:
        return ""
    return (
        f"SVC_ADMIN_KEY is set beside {named} named operator key(s): the shared key holds "
        "every role and the audit log names it only 'bootstrap'; unset it once the named "
        "keys (manage.py create_admin_key NAME --scope ROLES) are in use"
    )
