"""Who an admin API request is: the :class:`Operator` that ``X-Admin-Key`` names.

The bottom of ``operators``: the authentication class, the gate that checks the key and
the selectors that find it all name the operator from here, so none of them has to
import another to know it."""

from __future__ import annotations

from dataclasses import dataclass

HEADER = "X-Admin-Key"


@dataclass(frozen=True)
class Operator:
    """Whoever presented a valid ``X-Admin-Key``: ``request.user`` of an admin view."""

    key_name: str
    capabilities: frozenset[str] = frozenset()  # operators.roles.CAPABILITIES it holds
    is_authenticated = True

    def may(self, capability: str) -> bool:
        return capability in self.capabilities

    def __str__(self) -> str:
        return self.key_name
