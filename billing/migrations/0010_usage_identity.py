"""A usage record's identity becomes (licence, device, period) (contract §7), so two
licences on one camera meter separately; the same identity with other counts is kept as
a usage conflict for review. A licence is bound to one device, so the key is (licence,
period): the same identity, in an index as narrow as the old one.

No record is lost: every row already held is unique on (device, period), and the rows
of a licence are all of its one device (ingestion stores a record only for the device
its licence is bound to), so each row is unique on (licence, period) too. The new key is built before the old one goes, so the table
is never without one. On PostgreSQL both are constraints of the partitioned table,
built on every partition; on a large table this migration takes the table's lock for
the time of one index build.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0009_guard_what_billing_reads"),
        ("customers", "0004_billing_address_tax_id"),
        ("licensing", "0011_signing_keys_move_to_signing"),
    ]

    operations = [
        migrations.CreateModel(
            name="UsageConflict",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("sku", models.CharField(max_length=64, verbose_name="SKU")),
                ("device_id", models.CharField(max_length=128)),
                ("period_start", models.BigIntegerField(help_text="Unix seconds.")),
                ("period_end", models.BigIntegerField(help_text="Unix seconds.")),
                (
                    "held_inferences",
                    models.BigIntegerField(help_text="Counts the service holds (billed)."),
                ),
                ("held_frames", models.BigIntegerField()),
                ("held_stream_seconds", models.BigIntegerField()),
                ("held_events", models.BigIntegerField()),
                (
                    "sent_inferences",
                    models.BigIntegerField(help_text="Counts the device sent (refused)."),
                ),
                ("sent_frames", models.BigIntegerField()),
                ("sent_stream_seconds", models.BigIntegerField()),
                ("sent_events", models.BigIntegerField()),
                (
                    "seen_at",
                    models.DateTimeField(help_text="When the conflicting record first arrived."),
                ),
            ],
            options={
                "verbose_name": "usage conflict",
                "ordering": ["-seen_at", "-id"],
            },
        ),
        migrations.AddConstraint(
            model_name="usagerecord",
            constraint=models.UniqueConstraint(
                fields=("license", "period_start", "period_end"),
                name="usage_record_identity",
            ),
        ),
        migrations.RemoveConstraint(
            model_name="usagerecord",
            name="usage_record_once",
        ),
        migrations.AddField(
            model_name="usageconflict",
            name="customer",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="customers.customer",
            ),
        ),
        migrations.AddField(
            model_name="usageconflict",
            name="license",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="licensing.license",
                verbose_name="licence",
            ),
        ),
        migrations.AddIndex(
            model_name="usageconflict",
            index=models.Index(fields=["customer", "-seen_at"], name="usage_conflict_customer"),
        ),
        migrations.AddConstraint(
            model_name="usageconflict",
            constraint=models.UniqueConstraint(
                fields=(
                    "license",
                    "device_id",
                    "period_start",
                    "period_end",
                    "sent_inferences",
                    "sent_frames",
                    "sent_stream_seconds",
                    "sent_events",
                ),
                name="usage_conflict_once",
            ),
        ),
    ]
