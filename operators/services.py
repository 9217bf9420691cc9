"""Writes of operator access: named operator keys, created and revoked (audited)."""

from __future__ import annotations

import re
import secrets

from django.db import transaction

from audit.services import audited
from config import clock
from config.errors import Conflict, InvalidInput, NotFound
from operators.models import OperatorKey
from operators.selectors import KEY_SCHEME, key_digest

NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._@-]{0,99}\Z")


@audited("operator_key.create", target=lambda result, arguments: arguments["name"])
@transaction.atomic
def operator_key_create(*, name: str, created_by: str = "") -> tuple[OperatorKey, str]:
    """Create a named operator key. Returns the row and the key itself, which is not
    stored anywhere and cannot be shown again."""
    if not NAME.match(name):
        raise InvalidInput(
            "key name must be 1-100 characters of letters, digits, '.', '_', '@' or '-', "
            f"starting with a letter or digit; got {name!r}"
        )
    if OperatorKey.objects.filter(name=name).exists():
        raise Conflict(f"an operator key named {name!r} already exists")
    prefix = secrets.token_hex(6)
    key = f"{KEY_SCHEME}_{prefix}_{secrets.token_urlsafe(32)}"
    row = OperatorKey.objects.create(
        name=name, prefix=prefix, digest=key_digest(key), created_by=created_by[:150]
    )
    return row, key


@audited("operator_key.revoke")
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
