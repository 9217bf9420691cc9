"""Guarded sums, and a bypass that is a privilege and leaves a trace (issue 38 items 3
and 4). PostgreSQL only; the ORM guards and ``manage.py reconcile`` cover SQLite.

* **Rollups sum their records.** A usage rollup (``billing_usagedaily``) that is
  inserted, or whose sums change, is checked when its transaction commits (a deferred
  constraint trigger): its records, records, inferences, frames, stream seconds and
  events must be exactly those of the usage records of its licence and UTC day (one
  range of the ``usage_record_identity`` index). Ingestion writes the records and the
  rollup in one statement, so it passes; ``UPDATE billing_usagedaily SET
  inferences = inferences + 5000000, records = records + 1`` or a forged rollup INSERT
  does not. Concurrent uploads to one bucket are serialised by the rollup row's lock,
  and the check runs holding it: it sees this transaction's records and every
  committed one, which are exactly what the row sums. Days of a pruned month
  (``billing_prunedusagemonth``) are not checked: their records are gone. A usage
  record itself refuses UPDATE (its counts are what the device sent), so records and
  rollup cannot be raised together; a DELETE of records fails the daily reconcile.
* **A revocation is dated when it happens.** ``licensing_license.revoked_at`` set from
  NULL must lie within ``REVOCATION_LEEWAY`` of the transaction's ``now()`` (clocks of
  the application and database hosts may differ by that much). On a test database
  (name starting ``test_``, the only kind where ``config.clock`` may be moved) the
  check runs only when the transaction sets ``billing.revocation_clock`` to
  ``checked``, so tests may revoke at a moved server clock.
* **The bypass is a privilege.** ``set_config('billing.maintenance', 'on', true)`` is
  honoured only when the session's login role is a member of ``svc_maintenance``
  (created here when the migrating role may; superusers are members of every role);
  for anyone else every guard that would be bypassed raises instead.
* **Each use leaves a trace.** Every row (or TRUNCATE) a guard let through under the
  bypass is written to ``billing_maintenancetrail`` by a SECURITY DEFINER function:
  when, transaction, session role, client address, application, table, operation, the
  row before and after. The trail refuses UPDATE, DELETE and TRUNCATE from everyone,
  and the application role has no privilege on it but SELECT.
* **The audit log is append-only.** ``audit_auditentry`` refuses UPDATE, DELETE and
  TRUNCATE except under the (recorded) bypass, with one exception: an UPDATE whose only
  change is ``repeats`` growing (the aggregation of identical refusals).

``manage.py db_roles`` prints the roles and grants for production (the application
role a non-superuser that owns nothing).
"""

import importlib

from django.db import migrations

ROLE = "svc_maintenance"
REVOCATION_LEEWAY = "5 minutes"
TRAIL = "billing_maintenancetrail"
USE = "billing_maintenance_use(TG_TABLE_NAME, TG_OP, to_jsonb(OLD), to_jsonb(NEW))"


def _guards():
    return importlib.import_module("billing.migrations.0009_guard_what_billing_reads")


ROLE_SQL = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
        CREATE ROLE {ROLE} NOLOGIN;
    END IF;
EXCEPTION
    WHEN duplicate_object THEN NULL;  -- created by a concurrent migration
    WHEN insufficient_privilege THEN
        RAISE NOTICE 'role {ROLE} not created (no CREATEROLE): create it as manage.py '
            'db_roles prints; until then the maintenance bypass is refused to everyone '
            'but superusers';
END
$$;
"""  # noqa: S608 - constants of this module

TRAIL_SQL = f"""
CREATE TABLE IF NOT EXISTS {TRAIL} (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    transaction_id bigint NOT NULL DEFAULT txid_current(),
    session_role text NOT NULL DEFAULT session_user,
    client_addr inet DEFAULT inet_client_addr(),
    application_name text NOT NULL DEFAULT coalesce(current_setting('application_name', true), ''),
    table_name text NOT NULL,
    operation text NOT NULL,
    old_row jsonb,
    new_row jsonb
);
CREATE INDEX IF NOT EXISTS {TRAIL}_table ON {TRAIL} (table_name, at);
REVOKE ALL ON {TRAIL} FROM PUBLIC;
REVOKE ALL ON SEQUENCE {TRAIL}_id_seq FROM PUBLIC;

CREATE OR REPLACE FUNCTION billing_trail_refuse() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% of the maintenance trail refused: it records every use of the '
        'billing.maintenance bypass and is append-only', TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;
DROP TRIGGER IF EXISTS {TRAIL}_append_only ON {TRAIL};
CREATE TRIGGER {TRAIL}_append_only BEFORE UPDATE OR DELETE ON {TRAIL}
    FOR EACH ROW EXECUTE FUNCTION billing_trail_refuse();
DROP TRIGGER IF EXISTS {TRAIL}_no_truncate ON {TRAIL};
CREATE TRIGGER {TRAIL}_no_truncate BEFORE TRUNCATE ON {TRAIL}
    FOR EACH STATEMENT EXECUTE FUNCTION billing_trail_refuse();

-- True when the transaction declared the bypass and the session may use it (the use
-- is then recorded); false when it did not; raises when it did without the privilege.
CREATE OR REPLACE FUNCTION billing_maintenance_use(
    what text, operation text, old_row jsonb, new_row jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF coalesce(current_setting('billing.maintenance', true), '') <> 'on' THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}')
            OR NOT pg_has_role(session_user, '{ROLE}', 'MEMBER') THEN
        RAISE EXCEPTION 'billing.maintenance refused to role %: only members of {ROLE} may '
            'bypass the guards of %; connect as the maintenance role for a repair',
            session_user, what USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO {TRAIL} (table_name, operation, old_row, new_row)
        VALUES (what, operation, old_row, new_row);
    RETURN true;
END
$$;
"""  # noqa: S608 - constants of this module

ROLLUP_SQL = """
CREATE OR REPLACE FUNCTION billing_usagedaily_sums_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    first_second bigint;
    bucket billing_usagedaily%ROWTYPE;
    held record;
BEGIN
    SELECT * INTO bucket FROM billing_usagedaily WHERE id = NEW.id;
    IF NOT FOUND OR EXISTS (SELECT 1 FROM billing_prunedusagemonth
            WHERE month = date_trunc('month', bucket.day)::date) THEN
        RETURN NULL;
    END IF;
    first_second := (bucket.day - DATE '1970-01-01')::bigint * 86400;
    SELECT count(*) AS records, coalesce(sum(inferences), 0) AS inferences,
            coalesce(sum(frames), 0) AS frames,
            coalesce(sum(stream_seconds), 0) AS stream_seconds,
            coalesce(sum(events), 0) AS events
        INTO held FROM billing_usagerecord
        WHERE license_id = bucket.license_id AND period_start >= first_second
            AND period_start < first_second + 86400;
    IF (bucket.records, bucket.inferences, bucket.frames, bucket.stream_seconds,
            bucket.events) IS DISTINCT FROM (held.records, held.inferences::bigint,
            held.frames::bigint, held.stream_seconds::bigint, held.events::bigint) THEN
        PERFORM billing_refuse(format('rollup of %s on %s summing %s records / %s inferences',
                bucket.license_id, bucket.day, bucket.records, bucket.inferences),
            format('a rollup is the sum of its usage records, which hold %s / %s; usage '
                'is added by POST /v1/usage', held.records, held.inferences));
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS billing_usagerecord_kept ON billing_usagerecord;
CREATE TRIGGER billing_usagerecord_kept BEFORE UPDATE ON billing_usagerecord FOR EACH ROW
    EXECUTE FUNCTION billing_guard_row('a usage record keeps the counts its device sent');
DROP TRIGGER IF EXISTS billing_usagedaily_sums_inserted ON billing_usagedaily;
CREATE CONSTRAINT TRIGGER billing_usagedaily_sums_inserted AFTER INSERT ON billing_usagedaily
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NOT billing_maintenance_use('billing_usagedaily', 'INSERT', NULL, to_jsonb(NEW)))
    EXECUTE FUNCTION billing_usagedaily_sums_check();
DROP TRIGGER IF EXISTS billing_usagedaily_sums_changed ON billing_usagedaily;
CREATE CONSTRAINT TRIGGER billing_usagedaily_sums_changed AFTER UPDATE ON billing_usagedaily
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((NEW.records, NEW.inferences, NEW.frames, NEW.stream_seconds, NEW.events,
            NEW.license_id, NEW.day)
        IS DISTINCT FROM (OLD.records, OLD.inferences, OLD.frames, OLD.stream_seconds,
            OLD.events, OLD.license_id, OLD.day)
        AND NOT billing_maintenance_use('billing_usagedaily', 'UPDATE', to_jsonb(OLD),
            to_jsonb(NEW)))
    EXECUTE FUNCTION billing_usagedaily_sums_check();
"""

REVOCATION_SQL = f"""
CREATE OR REPLACE FUNCTION billing_revocation_time_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_database() LIKE 'test\\_%'
            AND coalesce(current_setting('billing.revocation_clock', true), '') <> 'checked' THEN
        RETURN NEW;  -- a test database, whose server clock tests may move
    END IF;
    IF NEW.revoked_at BETWEEN now() - interval '{REVOCATION_LEEWAY}'
            AND clock_timestamp() + interval '{REVOCATION_LEEWAY}' THEN
        RETURN NEW;
    END IF;
    IF {USE} THEN
        RETURN NEW;
    END IF;
    PERFORM billing_refuse(format('revocation of licence %s at %s', NEW.id, NEW.revoked_at),
        format('a licence is revoked at the moment of the change (the database''s time is '
            '%s, give or take {REVOCATION_LEEWAY}); revoke it with manage.py or the admin API',
            now()));
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS licensing_license_revoked_now ON licensing_license;
CREATE TRIGGER licensing_license_revoked_now BEFORE UPDATE ON licensing_license FOR EACH ROW
    WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
    EXECUTE FUNCTION billing_revocation_time_guard();
"""

AUDIT_SQL = f"""
CREATE OR REPLACE FUNCTION audit_entry_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- The one change allowed: identical refusals of one minute counted on one row.
    IF TG_OP = 'UPDATE' AND (to_jsonb(NEW) - 'repeats') = (to_jsonb(OLD) - 'repeats')
            AND coalesce((to_jsonb(NEW) ->> 'repeats')::bigint, 0)
                >= coalesce((to_jsonb(OLD) ->> 'repeats')::bigint, 0) THEN
        RETURN NEW;
    END IF;
    IF {USE} THEN
        RETURN COALESCE(NEW, OLD);
    END IF;
    RAISE EXCEPTION '% of % refused: the audit log is append-only (an entry is never '
        'changed or removed; retention runs as the maintenance role)', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;
DROP TRIGGER IF EXISTS audit_auditentry_append_only ON audit_auditentry;
CREATE TRIGGER audit_auditentry_append_only BEFORE UPDATE OR DELETE ON audit_auditentry
    FOR EACH ROW EXECUTE FUNCTION audit_entry_guard();
DROP TRIGGER IF EXISTS audit_auditentry_no_truncate ON audit_auditentry;
CREATE TRIGGER audit_auditentry_no_truncate BEFORE TRUNCATE ON audit_auditentry
    FOR EACH STATEMENT EXECUTE FUNCTION audit_entry_guard();
"""


def _document_checks(run, when: str) -> None:
    for table in ("billing_invoice", "billing_invoiceline"):
        run(f"DROP TRIGGER IF EXISTS {table}_document_check ON {table}")
        run(
            f"CREATE CONSTRAINT TRIGGER {table}_document_check AFTER INSERT ON {table} "
            f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ({when.format(table=table)}) "
            "EXECUTE FUNCTION billing_document_check()"
        )


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    guards = _guards()
    run(ROLE_SQL, params=None)
    run(TRAIL_SQL, params=None)
    # 0009's guards, each honouring the bypass only for the role, and recording it.
    run(guards.FUNCTIONS.replace(guards.MAINTENANCE, USE), params=None)
    _document_checks(run, "NOT billing_maintenance_use('{table}', 'INSERT', NULL, to_jsonb(NEW))")
    run(ROLLUP_SQL, params=None)
    run(REVOCATION_SQL, params=None)
    run(AUDIT_SQL, params=None)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    guards = _guards()
    run("DROP TRIGGER IF EXISTS audit_auditentry_no_truncate ON audit_auditentry")
    run("DROP TRIGGER IF EXISTS audit_auditentry_append_only ON audit_auditentry")
    run("DROP FUNCTION IF EXISTS audit_entry_guard()")
    run("DROP TRIGGER IF EXISTS licensing_license_revoked_now ON licensing_license")
    run("DROP FUNCTION IF EXISTS billing_revocation_time_guard()")
    run("DROP TRIGGER IF EXISTS billing_usagedaily_sums_changed ON billing_usagedaily")
    run("DROP TRIGGER IF EXISTS billing_usagedaily_sums_inserted ON billing_usagedaily")
    run("DROP FUNCTION IF EXISTS billing_usagedaily_sums_check()")
    run("DROP TRIGGER IF EXISTS billing_usagerecord_kept ON billing_usagerecord")
    run(guards.FUNCTIONS, params=None)
    _document_checks(run, f"NOT {guards.MAINTENANCE}")
    run("DROP FUNCTION IF EXISTS billing_maintenance_use(text, text, jsonb, jsonb)")
    # The trail is kept (it is evidence); its guards and function go with it only if
    # a superuser drops the table by hand.


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0012_exact_prices"),
        ("licensing", "0012_exact_prices"),
        ("audit", "0007_refusals_repeats"),  # its relabelling runs before the guard
    ]

    operations = [migrations.RunPython(create, drop)]
