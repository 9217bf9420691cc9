"""Exactly the token issued: a token that verifies under one of the authority's keys counts
only when it is byte for byte the one on file, or one the licence was issued before a
renewal re-signed it (``SupersededToken``). A validly signed variant can only come from
a leaked signing key, so it is refused and recorded as a possible compromise."""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from django.db import transaction

from audit.models import AuditEntry
from audit.services import audit_record
from config.errors import Forbidden
from events.models import Event
from events.services import event_emit
from licensing.models import License, SupersededToken
from signing import keyring

log = logging.getLogger(__name__)

COMPROMISE_ACTION = "key.compromise_suspected"
_ABSENT = object()


class TokenNotIssued(Forbidden):
    """403: a token that verifies under one of the authority's keys but is not one the
    authority issued. Nothing but a signing key can make one, so it is recorded in the
    audit log as a possible key compromise.

    The entry must outlive the transaction that refused the token (it rolls back):
    :meth:`record` writes it, once, and is called where no such transaction is open."""

    def __init__(self, detail: str, *, license_id: str, audit_detail: dict[str, Any]) -> None:
        super().__init__(detail)
        self.license_id = license_id
        self.audit_detail = audit_detail
        self.recorded = False

    def record(self) -> None:
        if self.recorded:
            return
        self.recorded = True
        try:
            with transaction.atomic():
                audit_record(
                    action=COMPROMISE_ACTION,
                    result=AuditEntry.Result.REFUSED,
                    target=self.license_id,
                    detail=self.audit_detail,
                    message=self.detail,
                )
                customer_id = (
                    License.objects.filter(pk=self.license_id)
                    .values_list("customer_id", flat=True)
                    .first()
                )
                event_emit(
                    Event.Type.TOKEN_COMPROMISE_SUSPECTED,
                    customer_id=customer_id or "",
                    data={
                        "license_id": self.license_id,
                        "customer_id": customer_id or "",
                        "reason": str(self.detail)[:500],
                    },
                )
        except Exception:
            log.exception("could not record %s for %s", COMPROMISE_ACTION, self.license_id)


def differences(presented: Any, issued: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted claim name, presented value, issued value) of every claim that differs."""
    if isinstance(presented, dict) and isinstance(issued, dict):
        found = []
        for name in sorted(set(presented) | set(issued)):
            found += differences(
                presented.get(name, _ABSENT), issued.get(name, _ABSENT), f"{prefix}{name}."
            )
        return found
    if presented is _ABSENT or issued is _ABSENT or json.dumps(presented) != json.dumps(issued):
        name = prefix.rstrip(".")
        return [
            (
                name,
                None if presented is _ABSENT else presented,
                None if issued is _ABSENT else issued,
            )
        ]
    return []


def not_issued(
    *, what: str, license_id: str, claims: dict[str, Any], issued: dict[str, Any] | None, why: str
) -> TokenNotIssued:
    kid = claims.get("kid") or keyring.active_kid()
    differs = differences(claims, issued) if issued is not None else []
    return TokenNotIssued(
        f"{what} is validly signed (key {kid}) but is not the token this authority issued "
        f"({why}); refused and recorded as a possible signing-key compromise",
        license_id=license_id,
        audit_detail={
            "kid": kid,
            "license_id": license_id,
            "why": why,
            "claims": claims,
            "differs": {name: {"presented": a, "issued": b} for name, a, b in differs},
        },
    )


def issued_check(
    *,
    license_id: str,
    token_sha256: str,
    stored_sha256: str,
    claims: dict[str, Any],
    stored_claims: dict[str, Any] | None = None,
    what: str = "",
) -> TokenNotIssued | None:
    """None when the token presented (``token_sha256``) is the one stored, or one the
    licence was issued before a renewal re-signed it (:class:`SupersededToken`, read only
    on a mismatch); else the refusal to raise (not yet recorded; see
    :func:`token_check_issued`)."""
    if stored_sha256 and hmac.compare_digest(token_sha256, stored_sha256):
        return None
    if SupersededToken.objects.filter(license_id=license_id, token_sha256=token_sha256).exists():
        return None
    if stored_claims is None:
        stored_claims = (
            License.objects.filter(pk=license_id).values_list("claims", flat=True).first() or {}
        )
    names = [name for name, _, _ in differences(claims, stored_claims)]
    why = f"claims differ: {', '.join(names)}" if names else "same claims, other bytes"
    return not_issued(
        what=what or f"licence {license_id}",
        license_id=license_id,
        claims=claims,
        issued=stored_claims,
        why=why,
    )


def token_check_issued(
    *,
    license_id: str,
    token_sha256: str,
    stored_sha256: str,
    claims: dict[str, Any],
    stored_claims: dict[str, Any] | None = None,
    what: str = "",
) -> None:
    """Refuse a validly signed token that is not byte for byte the one issued.

    ``token_sha256`` is :func:`licensing.models.token_digest` of the presented token,
    ``claims`` its verified claims; ``stored_sha256`` and ``stored_claims`` come from the
    licence row (``License.token_sha256``, ``License.claims``; ``stored_claims`` None:
    read from the row only when they differ). The hashes are compared in constant time.
    On a mismatch: :class:`TokenNotIssued` (Forbidden, 403, naming the licence, the key
    and the claims that differ), after recording ``key.compromise_suspected`` (result
    ``refused``) in the audit log. Call it outside any transaction the refusal rolls
    back; inside one, catch the exception after that transaction and call ``.record()``
    again (it writes once)."""
    refusal = issued_check(
        license_id=license_id,
        token_sha256=token_sha256,
        stored_sha256=stored_sha256,
        claims=claims,
        stored_claims=stored_claims,
        what=what,
    )
    if refusal is not None:
        refusal.record()
        raise refusal
