"""Who may do what: the capabilities the service checks and the roles that hold them.

One table for every surface. An admin API method names the capability it needs with
:func:`operators.permissions.requires`. A console view or action asks
``config.admin.base.may(request, capability)``, and ``svcctl`` calls the API. Roles are Django
groups of the same names, holding these capabilities as permissions
(``operators.Capability``). Migration 0002 created them, and
``tests/operators/test_roles.py`` checks that the database still matches this table.
A named operator key carries roles too (``create_admin_key NAME --scope ROLE,...``).
The bootstrap ``SVC_ADMIN_KEY`` and superusers hold every capability.
"""

from __future__ import annotations

# codename -> what it allows (the permission's name in the console).
CAPABILITIES: dict[str, str] = {
    "view_service": "Read customers, fleet, licences, billing, events and the audit log",
    "release_seats": "Release a batch seat so another device may take it",
    "renew_licences": "Renew batches and direct licences for another term",
    "manage_customers": "Create and edit customers",
    "issue_licences": "Issue batches and direct licences",
    "revoke_licences": "Revoke licences, unit licences and batch keys",
    "suspend_licences": "Suspend and reinstate licences, batch keys and customers",
    "manage_webhooks": "Create, change, rotate and redeliver webhook endpoints",
    "manage_billing": "Issue invoices and credit notes; exports and reconciliation",
    "manage_signing_keys": "Install, retire and revoke signing keys",
    "manage_operator_access": "Create and revoke operator API keys",
    "reset_second_factors": "Reset another console user's second factor",
}

ROLES: dict[str, frozenset[str]] = {
    "viewer": frozenset({"view_service"}),
    "support": frozenset({"view_service", "release_seats", "renew_licences"}),
    "operator": frozenset(
        {
            "view_service",
            "manage_customers",
            "issue_licences",
            "revoke_licences",
            "suspend_licences",
            "renew_licences",
            "release_seats",
            "manage_webhooks",
        }
    ),
    "finance": frozenset({"view_service", "manage_billing"}),
    "key-admin": frozenset(
        {"view_service", "manage_signing_keys", "manage_operator_access", "reset_second_factors"}
    ),
}

EVERY_CAPABILITY = frozenset(CAPABILITIES)
APP_LABEL = "operators"


def capabilities_of(roles) -> frozenset[str]:
    """What holding ``roles`` allows, by this table."""
    held: set[str] = set()
    for role in roles:
        held |= ROLES.get(role, frozenset())
    return frozenset(held)


def roles_holding(capability: str) -> list[str]:
    """The roles that hold ``capability``, for messages that say who may."""
    return [role for role, held in ROLES.items() if capability in held]


def parse_roles(text: str) -> list[str]:
    """``viewer,finance`` as a list of known roles; ValueError naming what is unknown."""
    return known_roles([part.strip() for part in text.split(",")])


def known_roles(roles: list[str]) -> list[str]:
    """``roles`` without blanks and repeats; ValueError naming what is unknown, or when
    none is left."""
    roles = [role for role in roles if role]
    unknown = [role for role in roles if role not in ROLES]
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(unknown)}; the roles are {', '.join(ROLES)}")
    if not roles:
        raise ValueError(f"name at least one role of {', '.join(ROLES)}")
    return list(dict.fromkeys(roles))
