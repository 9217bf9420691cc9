from django.db import migrations

from svccore import catalogue


def seed(apps, schema_editor):
    Sku = apps.get_model("licensing", "Sku")
    for entry in catalogue.load_entries():
        # The fields of contract §5 only: the ones added later (catalogue.OPTIONAL_FIELDS)
        # have no column yet at this point of the history, and their defaults are theirs.
        fields = {k: v for k, v in catalogue.to_json(entry).items() if k in catalogue.ENTRY_FIELDS}
        code = fields.pop("sku")
        Sku.objects.get_or_create(code=code, defaults=fields)


class Migration(migrations.Migration):
    dependencies = [("licensing", "0001_initial")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
