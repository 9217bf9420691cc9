from django.db import migrations

from svccore import catalogue


def seed(apps, schema_editor):
    Sku = apps.get_model("licensing", "Sku")
    # The entry's fields this model has at this point of the history: fields added to
    # the entry later (trial_days, migration 0019; max_offline_days, 0015) are columns only from there on.
    columns = {field.name for field in Sku._meta.get_fields()}
    for entry in catalogue.load_entries():
        fields = {k: v for k, v in catalogue.to_json(entry).items() if k in columns | {"sku"}}
        code = fields.pop("sku")
        Sku.objects.get_or_create(code=code, defaults=fields)


class Migration(migrations.Migration):
    dependencies = [("licensing", "0001_initial")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
