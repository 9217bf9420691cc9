"""Issue 38 items 3 and 4, one tamper test per case: guarded sums (rollups and billed
counters change only through ingestion and issuing; a revocation is dated when it
happens) and a bypass that is a privilege and leaves a trace (only svc_maintenance may
use ``billing.maintenance``; each use is in an append-only trail; the audit log refuses
UPDATE, DELETE and TRUNCATE). Each case is refused by the database, fails the daily
``reconcile`` or, where the issue says so, ``reconcile --deep``.

The role cases connect as real login roles set up by ``manage.py db_roles``: an
application role that is no superuser and owns nothing, and a maintenance login role.
(The test user ``postgres`` is a superuser, a member of every role, so it keeps the
bypass.) ``pytest -s`` prints the tamper table."""

from __future__ import annotations

import datetime as dt
import io
import json
import time

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from audit.models import AuditEntry
from billing.issuing import invoice_issue
from billing.models import UsageDaily
from licensing.models import License, Renewal
from licensing.services.renewals import license_renew
from tests.billing.conftest import hour, record
from tests.history import commit_checks, rewritten

POSTGRES = connection.vendor == "postgresql"
pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(not POSTGRES, reason="database guards and roles: PostgreSQL only"),
]
JAN, FEB, MAR = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3))
APP_ROLE, MAINTENANCE_LOGIN = "svc_tamper_app", "svc_tamper_maintenance"
REFUSED, RECONCILE, DEEP = "refused", "caught by reconcile", "caught by --deep"

TABLE: dict[str, set[str]] = {}


@pytest.fixture(scope="module", autouse=True)
def tamper_table():
    yield
    if TABLE:
        width = max(map(len, TABLE))
        print("\n\ntamper table (issue 38 items 3 and 4)")
        print(f"{'case':<{width}}  outcome")
        for case, outcomes in TABLE.items():
            known = [o for o in (REFUSED, RECONCILE, DEEP) if o in outcomes]
            order = known + sorted(outcomes - set(known))
            print(f"{case:<{width}}  {' / '.join(order)}")


def outcome(case: str, *found: str) -> None:
    TABLE.setdefault(case, set()).update(found)


def reconcile(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("reconcile", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return 1, out.getvalue() + err.getvalue() + str(exc)
    return 0, out.getvalue() + err.getvalue()


def refused(sql: str, params=(), match: str = "refused", setup: str = "") -> None:
    """``sql`` in the test's connection (the superuser) is refused, at the latest when
    its transaction's deferred checks run."""
    commit_checks()
    with pytest.raises(DatabaseError, match=match):
        with transaction.atomic(), connection.cursor() as cursor:
            if setup:
                cursor.execute(setup)
            cursor.execute(sql, params)
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def forced(sql: str, params=()) -> None:
    """``sql`` with every trigger off (replica role: what a superuser or a restore can
    do), so what reconcile sees is the change itself."""
    commit_checks()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)


@pytest.fixture
def billed(customer, direct, upload):
    """A metered camera with 40,000 inferences in January, invoiced: a billed bucket."""
    lic = direct("API-METERED", "cam-m1", at=JAN + dt.timedelta(days=1))
    response = upload(lic, [record(hour(JAN) + 9 * 86400, inferences=40_000)])
    assert response.status_code == 200, response.content
    invoice_issue(customer_id=customer.id, period_days=31, end=FEB)
    bucket = UsageDaily.objects.get(license=lic)
    assert bucket.billed_inferences == 40_000
    assert reconcile()[0] == 0
    return bucket


# --- item 3: guarded sums --------------------------------------------------------------


def test_rollup_inflation_is_refused_and_fails_the_daily_reconcile(billed):
    inflate = (
        "UPDATE billing_usagedaily SET inferences = inferences + 5000000, "
        "records = records + 1 WHERE id = %s"
    )
    refused(
        inflate,
        [billed.pk],
        match=f"rollup of {billed.license_id} on 2026-01-10 summing 2 records / 5040000 "
        "inferences refused.*the sum of its usage records, which hold 1 / 40000",
    )
    forced(inflate, [billed.pk])
    code, output = reconcile()
    assert code == 1
    assert (
        f"rollup of {billed.license_id} on 2026-01-10 sums 2 records / 5040000 inferences, "
        "the records hold 1 / 40000"
    ) in output
    outcome("rollup inflation (+5,000,000 inferences, +1 record)", REFUSED, RECONCILE)


def test_a_forged_rollup_is_refused_and_fails_the_daily_reconcile(billed):
    forge = (
        "INSERT INTO billing_usagedaily (license_id, customer_id, sku, day, records, "
        "inferences, frames, stream_seconds, events, billed_records, billed_inferences) "
        "VALUES (%s, %s, %s, DATE '2026-02-03', 1, 7000000, 0, 0, 0, 0, 0)"
    )
    params = [billed.license_id, billed.customer_id, billed.sku]
    refused(forge, params, match="summing 1 records / 7000000 inferences refused")
    forced(forge, params)
    code, output = reconcile()
    assert code == 1
    assert (
        f"rollup of {billed.license_id} on 2026-02-03 sums 1 records / 7000000 inferences, "
        "the records hold 0 / 0"
    ) in output
    outcome("forged rollup INSERT (7,000,000 inferences)", REFUSED, RECONCILE)


def test_a_record_raised_with_its_rollup_is_refused(billed):
    """Records and rollup raised together would agree: a record keeps its counts."""
    refused(
        "UPDATE billing_usagerecord SET inferences = inferences + 5000000 WHERE license_id = %s",
        [billed.license_id],
        match="UPDATE of billing_usagerecord.* refused.*keeps the counts its device sent",
    )
    outcome("usage record raised with its rollup", REFUSED)


def test_billed_counters_set_off_the_ledger_are_refused_and_fail_reconcile(billed):
    for sql in (
        "UPDATE billing_usagedaily SET billed_inferences = 0, billed_records = 0 WHERE id = %s",
        "UPDATE billing_usagedaily SET billed_inferences = billed_inferences - 1 WHERE id = %s",
    ):
        refused(sql, [billed.pk], match="sums of its ledger entries")
    forced(
        "UPDATE billing_usagedaily SET billed_inferences = 0, billed_records = 0 WHERE id = %s",
        [billed.pk],
    )
    code, output = reconcile()
    assert code == 1 and f"usage of {billed.license_id} on 2026-01-10" in output
    assert "counters 0 / 0, ledger 1 / 40000" in output
    outcome("billed counters reset", REFUSED, RECONCILE)


def test_ingestion_still_adds_to_a_billed_rollup(billed, upload):
    """The check passes what ingestion does (records and rollup in one statement)."""
    lic = License.objects.get(pk=billed.license_id)
    late = record(hour(JAN) + 9 * 86400 + 3600, inferences=5)
    assert upload(lic, [late]).json()["accepted"] == 1
    commit_checks()
    billed.refresh_from_db()
    assert (billed.records, billed.inferences) == (2, 40_005)
    assert reconcile()[0] == 0


CHECKED = "SELECT set_config('billing.revocation_clock', 'checked', true)"


def test_a_back_dated_revocation_is_refused(customer, direct):
    lic = direct("DETECT-STD", "cam-r1")
    for moment in ("2000-01-01 00:00:00+00", "now() - interval '1 day'",
                   "now() + interval '1 day'"):  # fmt: skip
        value = f"'{moment}'" if moment[0].isdigit() else moment
        refused(
            f"UPDATE licensing_license SET revoked_at = {value} WHERE id = %s",  # noqa: S608
            [lic.pk],
            match=f"revocation of licence {lic.pk} at .* refused.*at the moment of the change",
            setup=CHECKED,
        )
    # The moment of the change passes; once set, it never changes (billing 0009).
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(CHECKED)
        cursor.execute("UPDATE licensing_license SET revoked_at = now() WHERE id = %s", [lic.pk])
    refused("UPDATE licensing_license SET revoked_at = '2000-01-01' WHERE id = %s", [lic.pk])
    outcome("back-dated revocation (2000-01-01)", REFUSED)


# --- item 4: the bypass is a privilege and leaves a trace -------------------------------


@pytest.fixture
def roles():
    """The application and maintenance login roles on the test database, as
    ``manage.py db_roles --apply`` sets them up; ``roles(name)`` connects as one."""
    for attempt in range(5):
        # Roles are the cluster's: parallel workers (pytest -n, one database each) may
        # alter the same role at once ("tuple concurrently updated"); try again.
        try:
            with transaction.atomic():
                call_command(
                    "db_roles", "--app-role", APP_ROLE, "--maintenance-login",
                    MAINTENANCE_LOGIN, "--apply", stdout=io.StringIO(),
                )  # fmt: skip
            break
        except DatabaseError:
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    settings = connection.settings_dict
    opened = []

    def connect(role: str) -> psycopg.Connection:
        conn = psycopg.connect(
            host=settings["HOST"] or "127.0.0.1",
            port=settings["PORT"] or 5432,
            dbname=settings["NAME"],
            user=role,
        )
        opened.append(conn)
        with conn.cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = session_user")
            assert cursor.fetchone() == (False,)
        conn.rollback()
        return conn

    yield connect
    for conn in opened:
        conn.close()


def refused_as(conn: psycopg.Connection, sql: str, params=(), *, match: str) -> None:
    with pytest.raises(psycopg.Error, match=match):
        with conn.cursor() as cursor:
            cursor.execute("SELECT set_config('billing.maintenance', 'on', true)")
            cursor.execute(sql, params)
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    conn.rollback()


def trail(table: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT session_role, operation, old_row, new_row FROM billing_maintenancetrail "
            "WHERE table_name = %s ORDER BY id",
            [table],
        )
        rows = cursor.fetchall()
    # Django's cursor hands jsonb over as text (JSONField decodes it).
    return [
        (role, op, *(json.loads(r) if isinstance(r, str) else r for r in (old, new)))
        for role, op, old, new in rows
    ]


@pytest.mark.django_db(transaction=True)
def test_the_application_role_cannot_use_the_bypass(billed, roles):
    app = roles(APP_ROLE)
    before = len(trail("billing_usagedaily"))
    refusal = f"billing.maintenance refused to role {APP_ROLE}: only members of svc_maintenance"
    for sql in (
        "UPDATE billing_usagedaily SET inferences = inferences + 5000000, records = records + 1",
        "UPDATE billing_usagedaily SET billed_inferences = 0, billed_records = 0",
        "UPDATE billing_usagedaily SET records = records - 1",
        "DELETE FROM billing_usagedaily",
        f"{CHECKED}; UPDATE licensing_license SET revoked_at = '2000-01-01'",  # noqa: S608
        "UPDATE licensing_license SET issued_at = issued_at - interval '60 days'",
        "UPDATE billing_usagerecord SET inferences = inferences + 5000000",
    ):
        refused_as(app, sql, match=refusal)
    # Without the switch, the guards refuse as they always did.
    with pytest.raises(psycopg.Error, match="refused"):
        app.execute("UPDATE billing_usagedaily SET records = records - 1")
    app.rollback()
    with pytest.raises(psycopg.Error, match="permission denied"):
        app.execute("TRUNCATE billing_usagedaily")
    app.rollback()
    assert len(trail("billing_usagedaily")) == before  # nothing was let through
    assert reconcile()[0] == 0
    outcome("bypass by the application role", REFUSED)


@pytest.mark.django_db(transaction=True)
def test_the_maintenance_role_uses_the_bypass_on_the_record(billed, roles):
    repair, lic = roles(MAINTENANCE_LOGIN), billed.license_id
    with repair.cursor() as cursor:
        cursor.execute("SELECT set_config('billing.maintenance', 'on', true)")
        cursor.execute(
            "UPDATE licensing_license SET issued_at = issued_at - interval '1 day' WHERE id = %s",
            [billed.license_id],
        )
        cursor.execute("SELECT txid_current()")
        (txid,) = cursor.fetchone()
    repair.commit()
    (entry,) = [row for row in trail("licensing_license") if (row[3] or {}).get("id") == lic]
    role, operation, old, new = entry
    assert (role, operation) == (MAINTENANCE_LOGIN, "UPDATE")
    assert old["issued_at"] != new["issued_at"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM billing_maintenancetrail WHERE transaction_id = %s", [txid]
        )
        assert cursor.fetchone() == (1,)
    outcome("bypass by the maintenance role", "recorded in the trail")


@pytest.mark.django_db(transaction=True)
def test_the_trail_refuses_every_edit(billed, roles):
    with rewritten(), connection.cursor() as cursor:  # the superuser: one trail row
        cursor.execute(
            "UPDATE licensing_license SET issued_at = issued_at - interval '1 s' WHERE id = %s",
            [billed.license_id],
        )
    app, repair = roles(APP_ROLE), roles(MAINTENANCE_LOGIN)
    for conn, denial in ((app, "permission denied"), (repair, "permission denied")):
        for sql in (
            "UPDATE billing_maintenancetrail SET session_role = 'nobody'",
            "DELETE FROM billing_maintenancetrail",
            "TRUNCATE billing_maintenancetrail",
            "INSERT INTO billing_maintenancetrail (table_name, operation) VALUES ('x', 'y')",
        ):
            refused_as(conn, sql, match=denial)
    # Even the owner (a superuser here) under the bypass: append-only.
    for sql in (
        "UPDATE billing_maintenancetrail SET session_role = 'nobody'",
        "DELETE FROM billing_maintenancetrail",
        "TRUNCATE billing_maintenancetrail",
    ):
        refused(
            sql,
            match="of the maintenance trail refused",
            setup="SELECT set_config('billing.maintenance', 'on', true)",
        )
    assert trail("licensing_license")
    outcome("trail UPDATE/DELETE/TRUNCATE (app, maintenance, owner)", REFUSED)


def _columns() -> set[str]:
    with connection.cursor() as cursor:
        return {
            c.name
            for c in connection.introspection.get_table_description(cursor, "audit_auditentry")
        }


@pytest.mark.django_db(transaction=True)
def test_the_audit_log_refuses_change_to_the_application_role(billed, roles):
    entry = AuditEntry.objects.create(
        actor="finance", actor_kind="cli", action="invoice.credit", target="INV-2026-000001",
        result="ok",
    )  # fmt: skip
    app = roles(APP_ROLE)
    for sql in (
        "UPDATE audit_auditentry SET message = 'nothing happened' WHERE id = %s",
        "UPDATE audit_auditentry SET at = at - interval '1 day' WHERE id = %s",
    ):
        for setup in ("", "SELECT set_config('billing.maintenance', 'on', true)"):
            with pytest.raises(psycopg.Error, match="refused"):
                with app.cursor() as cursor:
                    if setup:
                        cursor.execute(setup)
                    cursor.execute(sql, [entry.pk])
            app.rollback()
    for sql in ("DELETE FROM audit_auditentry WHERE id = %s", "TRUNCATE audit_auditentry"):
        with pytest.raises(psycopg.Error, match="permission denied|refused"):
            app.execute(sql, [entry.pk] if "%s" in sql else None)
        app.rollback()
    # Without the privileges (as the owner), the guard still refuses outside the bypass.
    refused("DELETE FROM audit_auditentry WHERE id = %s", [entry.pk], match="append-only")
    refused("TRUNCATE audit_auditentry", match="append-only")
    if "repeats" in _columns():  # refusal aggregation (another change): only growing
        with app.cursor() as cursor:
            cursor.execute("UPDATE audit_auditentry SET repeats = repeats + 1 WHERE id = %s",
                           [entry.pk])  # fmt: skip
        app.commit()
        with pytest.raises(psycopg.Error, match="append-only"):
            app.execute("UPDATE audit_auditentry SET repeats = 1 WHERE id = %s", [entry.pk])
        app.rollback()
    assert AuditEntry.objects.filter(pk=entry.pk, message="").exists()
    outcome("audit UPDATE/DELETE/TRUNCATE by the application role", REFUSED)


def test_a_renewal_moved_under_the_bypass_fails_reconcile_deep(customer, direct, server_clock):
    lic = direct("DETECT-STD", "cam-n1", at=JAN + dt.timedelta(days=1))
    with server_clock.at(JAN + dt.timedelta(days=20)):
        renewal = license_renew(idempotency_key="n-1", license_id=lic.id).renewal
    invoice = invoice_issue(customer_id=customer.id, period_days=31, end=FEB)
    assert invoice.lines.filter(kind="renewal").exists()
    assert reconcile("--deep")[0] == 0
    name = f"renewal {renewal.pk} of {lic.id}"
    for column, sign in (("renewed_at", "+"), ("expires_at", "+"), ("renewed_at", "-")):
        commit_checks()
        with transaction.atomic():
            with rewritten(), connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE licensing_renewal SET {column} = {column} {sign} "  # noqa: S608
                    "interval '60 days' WHERE id = %s",
                    [renewal.pk],
                )
            code, output = reconcile("--deep")
            assert code == 1, (column, sign, output)
            assert name in output
            if column == "renewed_at":
                assert f"{name}: renewed at " in output and "its audit entry" in output
                assert f"billed on {invoice.number} for 1–31 January 2026" in output
            else:
                assert f"{name}: ends " in output and "days from" in output
            role, operation, old, new = trail("licensing_renewal")[-1]
            assert (role, operation, old["id"]) == ("postgres", "UPDATE", renewal.pk)
            assert old[column] != new[column]
            transaction.set_rollback(True)
    assert Renewal.objects.get(pk=renewal.pk).renewed_at == renewal.renewed_at
    outcome("renewal moved 60 days under the bypass", DEEP)
