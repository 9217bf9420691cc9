"""On PostgreSQL, everything billing reads is append-only or guarded in the database, so
no UPDATE, DELETE or TRUNCATE from any client can re-open a billed event (issue 23):

* ``billing_usagedaily``: the counters only grow, a bucket keeps its licence, customer,
  SKU and day, and its billed counters may only be set to the sum of the bucket's
  ledger entries (what ``billing.ledger`` does after writing them); never deleted.
* ``licensing_activation``: never deleted; its batch, licence, seat transfer and time
  never change.
* ``licensing_renewal``: written once.
* ``licensing_license``: never deleted; its kind, customer, SKU, batch, price, currency
  and issue time never change, nor its revocation time once set.
* ``licensing_batch``: its customer, SKU, price and currency never change.
* ``billing_documentsequence``: a number only grows.
* ``BEFORE TRUNCATE`` on every ledger table and on each of the above (row triggers do
  not see TRUNCATE).
* A new invoice or line is checked at commit (a deferred constraint trigger): its
  number comes from the sequence and its total is the sum of its lines (a credit
  note's, the negation of the credited invoice's).

A repair that must rewrite history (a test moving an event in time, a data fix) says so
in its transaction: ``SELECT set_config('billing.maintenance', 'on', true)``; then
``manage.py reconcile --deep`` checks the result. The ORM guards and ``reconcile`` cover
SQLite, and issuing cross-checks every bucket it bills against the ledger on both.
"""

from django.db import migrations

MAINTENANCE = "coalesce(current_setting('billing.maintenance', true), '') = 'on'"

FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION billing_refuse(what text, fix text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% refused: billing reads it, and changing it could bill an event twice '
        'or never; %', what, fix USING ERRCODE = 'restrict_violation';
END
$$;

CREATE OR REPLACE FUNCTION billing_guard_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF {MAINTENANCE} THEN
        RETURN COALESCE(NEW, OLD);
    END IF;
    PERFORM billing_refuse(TG_OP || ' of ' || TG_TABLE_NAME, TG_ARGV[0]);
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION billing_guard_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT {MAINTENANCE} THEN
        PERFORM billing_refuse('TRUNCATE of ' || TG_TABLE_NAME,
            'billing records are kept for audit (set billing.maintenance in the transaction '
            'of a deliberate wipe)');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION billing_usagedaily_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ledger_records bigint;
    ledger_inferences bigint;
BEGIN
    IF {MAINTENANCE} THEN
        RETURN NEW;
    END IF;
    IF NEW.license_id <> OLD.license_id OR NEW.customer_id <> OLD.customer_id
            OR NEW.sku <> OLD.sku OR NEW.day <> OLD.day
            OR NEW.records < OLD.records OR NEW.inferences < OLD.inferences
            OR NEW.frames < OLD.frames OR NEW.stream_seconds < OLD.stream_seconds
            OR NEW.events < OLD.events THEN
        PERFORM billing_refuse('UPDATE of usage rollup ' || OLD.id,
            'a rollup keeps its bucket and its sums only grow, as records arrive');
    END IF;
    IF NEW.billed_records IS DISTINCT FROM OLD.billed_records
            OR NEW.billed_inferences IS DISTINCT FROM OLD.billed_inferences THEN
        SELECT COALESCE(SUM(records), 0), COALESCE(SUM(quantity), 0)
            INTO ledger_records, ledger_inferences
            FROM billing_ledgerentry WHERE bucket_id = NEW.id AND kind = 'usage';
        IF NEW.billed_records <> ledger_records OR NEW.billed_inferences <> ledger_inferences THEN
            PERFORM billing_refuse(format('billed counters %s / %s of usage rollup %s',
                    NEW.billed_records, NEW.billed_inferences, NEW.id),
                format('they are the sums of its ledger entries, %s / %s',
                    ledger_records, ledger_inferences));
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION billing_document_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    doc_id bigint;
    doc billing_invoice%ROWTYPE;
    lines_total numeric;
    last_number integer;
    credited_total numeric;
BEGIN
    IF {MAINTENANCE} THEN
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME = 'billing_invoice' THEN
        doc_id := NEW.id;
    ELSE
        doc_id := NEW.invoice_id;
    END IF;
    SELECT * INTO doc FROM billing_invoice WHERE id = doc_id;
    IF NOT FOUND THEN
        RETURN NULL;  -- the foreign key reports a line without its invoice
    END IF;
    SELECT last INTO last_number FROM billing_documentsequence
        WHERE series = CASE WHEN doc.kind = 'invoice' THEN 'INV' ELSE 'CN' END
            AND year = doc.year;
    IF last_number IS NULL OR doc.seq > last_number OR doc.number <> format('%s-%s-%s',
            CASE WHEN doc.kind = 'invoice' THEN 'INV' ELSE 'CN' END, doc.year,
            lpad(doc.seq::text, 6, '0')) THEN
        PERFORM billing_refuse('INSERT of document ' || doc.number,
            'documents are numbered by issue_invoices and credit_note from their sequence');
    END IF;
    SELECT COALESCE(SUM(amount), 0) INTO lines_total FROM billing_invoiceline
        WHERE invoice_id = doc.id;
    IF lines_total <> doc.total THEN
        PERFORM billing_refuse(format('%s with total %s and lines summing to %s',
                doc.number, doc.total, lines_total),
            'a total is the sum of its lines');
    END IF;
    IF doc.kind = 'credit_note' THEN
        SELECT total INTO credited_total FROM billing_invoice WHERE id = doc.credits_id;
        IF credited_total IS DISTINCT FROM -doc.total THEN
            PERFORM billing_refuse(format('%s with total %s crediting a total of %s',
                    doc.number, doc.total, credited_total),
                'a credit note negates what it credits');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
"""

# table -> (a row trigger's WHEN condition, or None for every UPDATE/DELETE; the fix).
ROW_GUARDS = {
    "licensing_activation": (
        "OLD.batch_id IS DISTINCT FROM NEW.batch_id OR OLD.license_id IS DISTINCT FROM "
        "NEW.license_id OR OLD.transfer_of_id IS DISTINCT FROM NEW.transfer_of_id "
        "OR OLD.activated_at IS DISTINCT FROM NEW.activated_at",
        "an activation is billed as it happened; release the seat or revoke the licence",
    ),
    "licensing_renewal": (None, "a renewal is billed as it was made"),
    "licensing_license": (
        "OLD.kind IS DISTINCT FROM NEW.kind OR OLD.customer_id IS DISTINCT FROM "
        "NEW.customer_id OR OLD.sku IS DISTINCT FROM NEW.sku OR OLD.batch_id IS DISTINCT "
        "FROM NEW.batch_id OR OLD.unit_price IS DISTINCT FROM NEW.unit_price "
        "OR OLD.currency IS DISTINCT FROM NEW.currency OR OLD.issued_at IS DISTINCT FROM "
        "NEW.issued_at OR (OLD.revoked_at IS NOT NULL AND OLD.revoked_at IS DISTINCT FROM "
        "NEW.revoked_at)",
        "a licence keeps its owner, SKU, price and times; issue another instead",
    ),
    "licensing_batch": (
        "OLD.customer_id IS DISTINCT FROM NEW.customer_id OR OLD.sku IS DISTINCT FROM "
        "NEW.sku OR OLD.unit_price IS DISTINCT FROM NEW.unit_price "
        "OR OLD.currency IS DISTINCT FROM NEW.currency",
        "a batch keeps its owner, SKU and price; issue another batch instead",
    ),
    "billing_documentsequence": (
        "NEW.last < OLD.last OR OLD.series IS DISTINCT FROM NEW.series "
        "OR OLD.year IS DISTINCT FROM NEW.year",
        "document numbers are never reused",
    ),
}
# Deleted never (a row guard without condition for DELETE).
NEVER_DELETED = (
    "licensing_activation",
    "licensing_license",
    "licensing_batch",
    "billing_documentsequence",
    "billing_usagedaily",
)
TRUNCATE_GUARDED = (
    "billing_invoice",
    "billing_invoiceline",
    "billing_invoiceusage",
    "billing_ledgerentry",
    "billing_usagedaily",
    "billing_documentsequence",
    "licensing_activation",
    "licensing_activationdaily",
    "licensing_renewal",
    "licensing_license",
    "licensing_batch",
)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run(FUNCTIONS, params=None)
    for table, (condition, fix) in ROW_GUARDS.items():
        events = "UPDATE" if condition else "UPDATE OR DELETE"
        when = f"WHEN ({condition}) " if condition else ""
        run(
            f"CREATE TRIGGER {table}_guard BEFORE {events} ON {table} FOR EACH ROW "
            f"{when}EXECUTE FUNCTION billing_guard_row({_quote(fix)})"
        )
    for table in NEVER_DELETED:
        run(
            f"CREATE TRIGGER {table}_kept BEFORE DELETE ON {table} FOR EACH ROW "
            f"EXECUTE FUNCTION billing_guard_row({_quote('billing keeps it for audit')})"
        )
    run(
        "CREATE TRIGGER billing_usagedaily_guard BEFORE UPDATE ON billing_usagedaily "
        "FOR EACH ROW WHEN (NEW.billed_records IS DISTINCT FROM OLD.billed_records "
        "OR NEW.billed_inferences IS DISTINCT FROM OLD.billed_inferences "
        "OR NEW.records < OLD.records OR NEW.inferences < OLD.inferences "
        "OR NEW.frames < OLD.frames OR NEW.stream_seconds < OLD.stream_seconds "
        "OR NEW.events < OLD.events OR NEW.license_id <> OLD.license_id "
        "OR NEW.customer_id <> OLD.customer_id OR NEW.sku <> OLD.sku OR NEW.day <> OLD.day) "
        "EXECUTE FUNCTION billing_usagedaily_guard()"
    )
    for table in TRUNCATE_GUARDED:
        run(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION billing_guard_truncate()"
        )
    for table in ("billing_invoice", "billing_invoiceline"):
        run(
            f"CREATE CONSTRAINT TRIGGER {table}_document_check AFTER INSERT ON {table} "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
            # Evaluated as the row goes in: a declared repair queues no check.
            f"WHEN (NOT {MAINTENANCE}) EXECUTE FUNCTION billing_document_check()"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    for table in ("billing_invoice", "billing_invoiceline"):
        run(f"DROP TRIGGER IF EXISTS {table}_document_check ON {table}")
    for table in TRUNCATE_GUARDED:
        run(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
    run("DROP TRIGGER IF EXISTS billing_usagedaily_guard ON billing_usagedaily")
    for table in NEVER_DELETED:
        run(f"DROP TRIGGER IF EXISTS {table}_kept ON {table}")
    for table in ROW_GUARDS:
        run(f"DROP TRIGGER IF EXISTS {table}_guard ON {table}")
    for function in (
        "billing_document_check()",
        "billing_usagedaily_guard()",
        "billing_guard_truncate()",
        "billing_guard_row()",
        "billing_refuse(text, text)",
    ):
        run(f"DROP FUNCTION IF EXISTS {function}")


class Migration(migrations.Migration):
    dependencies = [("billing", "0008_renewal_units_not_revoked")]

    operations = [migrations.RunPython(create, drop)]
