from django.db import migrations

from svccore import catalogue


def seed(apps, schema_editor):
    Sku = apps.get_model("licensing", "Sku")
    for entry in catalogue.load_entries():
        fields = catalogue.to_json(entry)
        code = fields.pop("sku")
        Sku.objects.get_or_create(code=code, defaults=fields)


class Migration(migrations.Migration):
    dependencies = [("licensing", "0001_initial")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
