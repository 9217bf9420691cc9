"""The database's document guard (migrations 0009 and 0013) for partial credit notes
(issue 43 item 4), PostgreSQL only. A credit note used to be the exact negation of its
invoice's total; now an invoice may have several, of chosen lines and quantities:

* a credit note that is not partial (the first, of the whole invoice) still negates its
  invoice's total exactly;
* any credit note credits a total of 0 or less, and the credit notes of an invoice
  together never credit more than its total.

``billing.credit_checks`` (``manage.py reconcile``) checks the lines, amounts and VAT.
"""

import importlib

from django.db import migrations

OLD_RULE = """    IF doc.kind = 'credit_note' THEN
        SELECT total INTO credited_total FROM billing_invoice WHERE id = doc.credits_id;
        IF credited_total IS DISTINCT FROM -doc.total THEN
            PERFORM billing_refuse(format('%s with total %s crediting a total of %s',
                    doc.number, doc.total, credited_total),
                'a credit note negates what it credits');
        END IF;
    END IF;"""

NEW_RULE = """    IF doc.kind = 'credit_note' THEN
        SELECT total INTO credited_total FROM billing_invoice WHERE id = doc.credits_id;
        SELECT COALESCE(SUM(total), 0) INTO notes_total FROM billing_invoice
            WHERE kind = 'credit_note' AND credits_id = doc.credits_id;
        IF (NOT doc.partial AND credited_total IS DISTINCT FROM -doc.total)
                OR doc.total > 0 OR credited_total IS NULL
                OR -notes_total > credited_total THEN
            PERFORM billing_refuse(format('%s with total %s crediting a total of %s '
                    '(its credit notes together %s)',
                    doc.number, doc.total, credited_total, notes_total),
                'a credit note credits at most what its invoice billed');
        END IF;
    END IF;"""


def _function(migration: str) -> str:
    """0009's billing_document_check() as 0013 installed it (the recorded bypass)."""
    guards = importlib.import_module("billing.migrations.0009_guard_what_billing_reads")
    bypass = importlib.import_module(f"billing.migrations.{migration}")
    functions = guards.FUNCTIONS.replace(guards.MAINTENANCE, bypass.USE)
    start = functions.index("CREATE OR REPLACE FUNCTION billing_document_check()")
    end = functions.index("$$;", start) + len("$$;")
    return functions[start:end]


def _old() -> str:
    return _function("0013_guarded_sums_and_bypass")


def _new() -> str:
    old = _old()
    assert OLD_RULE in old, "0009's credit-note rule changed: update this migration"
    return old.replace(OLD_RULE, NEW_RULE).replace(
        "    credited_total numeric;\n", "    credited_total numeric;\n    notes_total numeric;\n"
    )


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_new(), params=None)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_old(), params=None)


class Migration(migrations.Migration):
    dependencies = [("billing", "0018_partial_credit_notes")]

    operations = [migrations.RunPython(create, drop)]
