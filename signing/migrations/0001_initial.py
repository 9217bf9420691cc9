"""Signing keys move from the licensing app to this one: the model's state only, the
table (``licensing_signingkey``) and its rows stay where they are."""

import config.clock
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("licensing", "0010_seats_help_text"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="SigningKey",
                    fields=[
                        ("kid", models.CharField(max_length=16, primary_key=True, serialize=False, verbose_name="key id")),
                        ("public_key", models.CharField(help_text="Unpadded base64url of the raw key.", max_length=64)),
                        ("fingerprint", models.CharField(help_text="Hex SHA-256.", max_length=64, unique=True)),
                        ("certificate", models.TextField(blank=True, help_text="SVCK1 key certificate from a root.")),
                        ("use", models.CharField(choices=[("online", "online (licences, list pages, receipts)"), ("offline", "offline (air-gap minting: licences only)")], default="online", max_length=8)),
                        ("not_before", models.BigIntegerField(default=0, help_text="Unix seconds, from the certificate.")),
                        ("not_after", models.BigIntegerField(default=0, help_text="Unix seconds; 0 = no end.")),
                        ("created_at", models.DateTimeField(default=config.clock.now)),
                        ("retired_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("revoke_reason", models.CharField(blank=True, max_length=500)),
                    ],
                    options={
                        "verbose_name": "signing key",
                        "ordering": ["created_at", "kid"],
                        "db_table": "licensing_signingkey",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
