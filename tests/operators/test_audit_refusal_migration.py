"""Migration audit 0007 brings the history in line with the refusals: the wrong and
throttled operator keys stored as "failed" (the issue: the console's "Refused API keys"
link showed 0 of 84) become "refused", a throttled row's ``detail.count`` its
``repeats``; other rows keep theirs. Where the log is append-only already (PostgreSQL
with billing 0013's guard), the migration leaves the history and still completes."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from audit.models import AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("audit", "0006_actor_customer")]


def migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def _guarded() -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_trigger WHERE tgname = 'audit_auditentry_append_only'")
        return cursor.fetchone() is not None


def test_wrong_keys_of_the_past_become_refusals():
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()  # every app: all it undid
    migrate(BEFORE)
    # Whether audit 0007 will meet the append-only guard: going back to audit 0006 may
    # have undone billing's guard with the migrations that depend on audit, and then
    # 0007 runs before the guard is back.
    guarded = _guarded()
    try:
        apps = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        entry = apps.get_model("audit", "AuditEntry")
        common = {"actor": "anonymous", "actor_kind": "system", "ip": "198.51.100.4"}
        for _ in range(84):
            entry.objects.create(action="admin_key.refused", result="failed", **common)
        entry.objects.create(action="admin_key.throttled", result="failed",
                             detail={"count": 25, "minute": "2026-11-27T10:00:00"},
                             **common)  # fmt: skip
        entry.objects.create(action="batch.issue", result="failed", **common)
    finally:
        migrate(latest)
    refused = AuditEntry.objects.filter(result="refused")
    assert _guarded() == (connection.vendor == "postgresql")  # the guard is back after
    if guarded:
        assert not refused.exists()  # the history kept, the upgrade done
        assert AuditEntry.objects.filter(result="failed").count() == 86
        return
    assert refused.filter(action="admin_key.refused").count() == 84
    assert refused.get(action="admin_key.throttled").repeats == 25
    assert AuditEntry.objects.get(action="batch.issue").result == "failed"
    assert set(AuditEntry.objects.values_list("repeats", flat=True)) == {1, 25}
