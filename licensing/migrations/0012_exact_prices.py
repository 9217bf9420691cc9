"""Unit prices recorded exactly as quoted (issue 38, contract §6): batch, licence and
renewal prices widen from numeric(12,2) to numeric(14,4), the precision the catalogue
allows (``svccore.money.PRICE_PLACES``). Widening keeps every stored value.

On PostgreSQL the guards of billing migration 0009 on licensing_batch and
licensing_license name ``unit_price`` in their WHEN clause, and PostgreSQL refuses to
change the type of a column a trigger definition uses: they are dropped around the
change and created again exactly as 0009 wrote them.
"""

import importlib

from django.db import migrations, models

GUARDED = ("licensing_batch", "licensing_license")


def _guards():
    return importlib.import_module("billing.migrations.0009_guard_what_billing_reads")


def drop_guards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in GUARDED:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_guard ON {table}")


def create_guards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    guards = _guards()
    for table in GUARDED:
        condition, fix = guards.ROW_GUARDS[table]
        schema_editor.execute(
            f"CREATE TRIGGER {table}_guard BEFORE UPDATE ON {table} FOR EACH ROW "
            f"WHEN ({condition}) EXECUTE FUNCTION billing_guard_row({guards._quote(fix)})"
        )


class Migration(migrations.Migration):

    dependencies = [
        ('licensing', '0011_signing_keys_move_to_signing'),
        ('billing', '0009_guard_what_billing_reads'),
    ]

    operations = [
        migrations.RunPython(drop_guards, create_guards),
        migrations.AlterField(
            model_name='batch',
            name='unit_price',
            field=models.DecimalField(decimal_places=4, max_digits=14),
        ),
        migrations.AlterField(
            model_name='license',
            name='unit_price',
            field=models.DecimalField(blank=True, decimal_places=4, max_digits=14, null=True),
        ),
        migrations.AlterField(
            model_name='renewal',
            name='unit_price',
            field=models.DecimalField(decimal_places=4, max_digits=14),
        ),
        migrations.RunPython(create_guards, drop_guards),
    ]
