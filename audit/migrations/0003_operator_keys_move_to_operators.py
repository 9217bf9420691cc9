"""Operator keys now belong to the ``operators`` app (its 0001): the audit app forgets
the model; the table and its rows stay. The content type follows the model, so the
console's change history and any permission given on keys keep pointing at them."""

from django.db import migrations


def content_type_follows(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label="operators", model="operatorkey").exists():
        content_type.objects.filter(app_label="audit", model="operatorkey").update(
            app_label="operators"
        )


def content_type_returns(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label="audit", model="operatorkey").exists():
        content_type.objects.filter(app_label="operators", model="operatorkey").update(
            app_label="audit"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0002_audit_result_refused"),
        ("operators", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="OperatorKey")],
            database_operations=[],
        ),
        migrations.RunPython(content_type_follows, content_type_returns),
    ]
