"""The console finds a camera by any part of its device id, a licence by any part of
its id (issue 41: a search was by the id's start, so ``8E305A87`` found nothing inside
a MAC-derived id).

On PostgreSQL the search is ``UPPER(col::text) LIKE UPPER('%term%')`` (Django's
``icontains``), which a GIN index of trigrams (``pg_trgm``, ``gin_trgm_ops``) over that
same expression serves, so it stays fast at 10^6 units (docs/operators.md, ``make
bench``: bench/bench_search.py). The extension is created here (pg_trgm is a trusted
extension: the database's owner may create it). SQLite scans; nothing is created there.
"""

from django.db import migrations

# index name -> (table, column)
TRIGRAM_INDEXES = {
    "activation_device_trgm": ("licensing_activation", "device_id"),
    "license_device_trgm": ("licensing_license", "device_id"),
    "license_id_trgm": ("licensing_license", "id"),
}


def trigram_indexes_create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, (table, column) in TRIGRAM_INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} "
            f"USING gin ((UPPER({column}::text)) gin_trgm_ops)"
        )


def trigram_indexes_drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in TRIGRAM_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("licensing", "0012_exact_prices")]

    operations = [migrations.RunPython(trigram_indexes_create, trigram_indexes_drop)]
