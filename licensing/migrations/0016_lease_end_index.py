"""An index of the check-ins of licences under a lease (licensing.leases.lease_ends_before).

Built without blocking writes on PostgreSQL (CREATE INDEX CONCURRENTLY, outside a
transaction): the licence table is the fleet's largest, and activations go on while it
builds. SQLite builds it as usual."""

from django.db import migrations, models

INDEX = models.Index(
    fields=["checked_in_at"],
    name="license_checked_in",
    condition=models.Q(checked_in_at__isnull=False, revoked_at__isnull=True),
)


def index_create(apps, schema_editor):
    model = apps.get_model("licensing", "License")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.add_index(model, INDEX, concurrently=True)
    else:
        schema_editor.add_index(model, INDEX)


def index_drop(apps, schema_editor):
    model = apps.get_model("licensing", "License")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.remove_index(model, INDEX, concurrently=True)
    else:
        schema_editor.remove_index(model, INDEX)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("licensing", "0015_leases_and_suspensions")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="license", index=INDEX)],
            database_operations=[migrations.RunPython(index_create, index_drop)],
        )
    ]
