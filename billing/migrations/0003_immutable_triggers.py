"""On PostgreSQL, issued documents refuse UPDATE and DELETE in the database itself, so
no bulk update, raw SQL or other client can rewrite an invoice, a credit note, their
lines, usage meters or ledger entries. A correction is a credit note (a new document).
The ORM guards (``billing.models._Immutable``) remain for every database; SQLite keeps
only those (Django's test flush empties SQLite tables with DELETE).
"""

from django.db import migrations

TABLES = (
    "billing_invoice",
    "billing_invoiceline",
    "billing_invoiceusage",
    "billing_ledgerentry",
)

FUNCTION = """
CREATE OR REPLACE FUNCTION billing_issued_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% of % refused: issued billing documents are immutable; '
        'correct an invoice with a credit note (manage.py credit_note)', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTION, params=None)
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_immutable BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION billing_issued_immutable()"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_immutable ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS billing_issued_immutable()")


class Migration(migrations.Migration):
    dependencies = [("billing", "0002_ledger")]

    operations = [migrations.RunPython(create, drop)]
