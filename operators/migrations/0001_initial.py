"""Operator keys move from the audit app to this one: the model's state only, the table
(``audit_operatorkey``) and its rows stay where they are."""

import config.clock
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("audit", "0002_audit_result_refused"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="OperatorKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=100, unique=True)),
                        ("prefix", models.CharField(max_length=16, unique=True)),
                        ("digest", models.CharField(max_length=64)),
                        ("created_at", models.DateTimeField(default=config.clock.now)),
                        ("created_by", models.CharField(blank=True, max_length=150)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "verbose_name": "operator API key",
                        "ordering": ["name"],
                        "db_table": "audit_operatorkey",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
