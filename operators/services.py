"""Writes of operator access: named operator keys, created and revoked (audited).

No escalation: whoever creates a key grants it only roles it holds itself, in effect
(every capability of the role, as the database's groups hold them, is the granter's).
The console passes the user's capabilities; the host's administrator
(``manage.py create_admin_key``, with the database in hand) holds every role."""

from __future__ import annotations

import re
import secrets

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import transaction

from audit.services import audited
from config import clock
from config.errors import Conflict, Forbidden, InvalidInput, NotFound
from operators.models import OperatorKey
from operators.roles import APP_LABEL, CAPABILITIES, ROLES, known_roles
from operators.selectors import BOOTSTRAP_KEY_NAME, KEY_SCHEME, key_digest, role_capabilities
from svccore import dates

NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._@-]{0,99}\Z")


@audited("operator_key.create", target=lambda result, arguments: arguments["name"])
@transaction.atomic
def operator_key_create(
    *,
    name: str,
    roles: list[str],
    expires_at=None,
    created_by: str = "",
    granter: frozenset[str] | None = None,
) -> tuple[OperatorKey, str]:
    """Create a named operator key holding ``roles`` (``operators.roles.ROLES``), valid
    until ``expires_at`` (None: until revoked). ``granter`` is the capabilities of whoever
    creates it (None: the host's administrator, who holds every role): a role holding
    one it lacks is refused (Forbidden), see :func:`roles_beyond`. Returns the row and
    the key itself, which is not stored anywhere and cannot be shown again."""
    try:
        roles = known_roles(roles)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    if granter is not None:
        beyond = roles_beyond(roles, granter)
        if beyond:
            raise Forbidden(
                f"you may grant only roles you hold: {', '.join(beyond)} would give the key "
                f"{', '.join(sorted(role_capabilities(beyond) - granter))}, which you lack"
            )
    if expires_at is not None and expires_at <= clock.now():
        raise InvalidInput(f"the key would expire at {dates.moment(expires_at)}, already past")
    if not NAME.match(name):
        raise InvalidInput(
            "key name must be 1-100 characters of letters, digits, '.', '_', '@' or '-', "
            f"starting with a letter or digit; got {name!r}"
        )
    if name.lower() == BOOTSTRAP_KEY_NAME:
        raise InvalidInput(
            f"the name {name!r} is reserved for the bootstrap key (SVC_ADMIN_KEY), which the "
            "audit log names 'bootstrap': choose another name"
        )
    # Unique regardless of case: the audit log tells keys apart by their names.
    same = OperatorKey.objects.filter(name__iexact=name).values_list("name", flat=True).first()
    if same is not None:
        raise Conflict(f"an operator key named {same!r} already exists")
    prefix = secrets.token_hex(6)
    key = f"{KEY_SCHEME}_{prefix}_{secrets.token_urlsafe(32)}"
    row = OperatorKey.objects.create(
        name=name,
        prefix=prefix,
        digest=key_digest(key),
        created_by=created_by[:150],
        roles=roles,
        expires_at=expires_at,
    )
    return row, key


def roles_beyond(roles: list[str], held: frozenset[str]) -> list[str]:
    """Those of ``roles`` that hold a capability (as the database's groups hold them)
    outside ``held``: the roles a principal holding ``held`` may not grant."""
    return [role for role in roles if not role_capabilities([role]) <= held]


def _key_revoked(result: OperatorKey | None, arguments: dict) -> str:
    """The revoked key as the audit log names it: its name and prefix, not its row id."""
    if result is None:
        return str(arguments.get("name", ""))
    return f"{result.name} ({result.prefix})"


@audited("operator_key.revoke", target=_key_revoked)
@transaction.atomic
def operator_key_revoke(*, name: str) -> OperatorKey:
    """Revoke a named operator key at once. Idempotent."""
    try:
        row = OperatorKey.objects.select_for_update().get(name=name)
    except OperatorKey.DoesNotExist:
        raise NotFound(f"no operator key named {name!r}") from None
    if row.revoked_at is None:
        row.revoked_at = clock.now()
        row.save(update_fields=["revoked_at"])
    return row


def roles_ensure(**_signal) -> None:
    """Make sure every role of ``operators.roles.ROLES`` exists as a group holding at least
    its capabilities. It adds what is missing and takes nothing away, so a permission an
    administrator added to a group stays. Runs after every ``migrate`` (and after a test
    flush), so a deleted role comes back."""
    content_type, _ = ContentType.objects.get_or_create(app_label=APP_LABEL, model="capability")
    permissions = {}
    for codename, name in CAPABILITIES.items():
        permissions[codename], _ = Permission.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
    for role, held in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.add(*(permissions[codename] for codename in sorted(held)))
