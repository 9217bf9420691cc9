"""Signing keys now belong to the ``signing`` app (its 0001): licensing forgets the
model; the table and its rows stay. The content type follows the model, so the console's
change history and any permission given on keys keep pointing at them."""

from django.db import migrations


def content_type_follows(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label="signing", model="signingkey").exists():
        content_type.objects.filter(app_label="licensing", model="signingkey").update(
            app_label="signing"
        )


def content_type_returns(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label="licensing", model="signingkey").exists():
        content_type.objects.filter(app_label="signing", model="signingkey").update(
            app_label="licensing"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("licensing", "0010_seats_help_text"),
        ("signing", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="SigningKey")],
            database_operations=[],
        ),
        migrations.RunPython(content_type_follows, content_type_returns),
    ]
