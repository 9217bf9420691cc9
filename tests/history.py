"""Tests that move an event in time (an activation last month, a licence revoked before a
period) rewrite what billing reads, which PostgreSQL refuses outside a declared repair
(billing migration 0009). ``rewritten()`` declares one around such updates."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

SWITCH = "SELECT set_config('billing.maintenance', %s, true)"


@contextmanager
def rewritten() -> Iterator[None]:
    """Let the updates inside rewrite billed history (a no-op on SQLite)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(SWITCH, ["on"])
        yield  # an exception rolls the savepoint back, the switch with it
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(SWITCH, ["off"])
