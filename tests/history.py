"""Tests that move an event in time (an activation last month, a licence revoked before a
period) rewrite what billing reads, which PostgreSQL refuses outside a declared repair
(billing migration 0009). ``rewritten()`` declares one around such updates."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

SWITCH = "SELECT set_config('billing.maintenance', %s, true)"


def commit_checks() -> None:
    """Run the checks PostgreSQL defers to commit (billing's document checks, deferred
    foreign keys) now, as a commit would: a test's transaction never commits, so work
    done so far is checked before the test changes it behind billing's back."""
    if connection.vendor == "postgresql":
        connection.check_constraints()


@contextmanager
def rewritten() -> Iterator[None]:
    """Let the updates inside rewrite billed history (a no-op on SQLite); what was
    written before is checked first (:func:`commit_checks`)."""
    commit_checks()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(SWITCH, ["on"])
        yield  # an exception rolls the savepoint back, the switch with it
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(SWITCH, ["off"])
