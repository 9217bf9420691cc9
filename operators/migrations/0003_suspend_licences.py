"""Issue 42: the capability to suspend and reinstate, held by the operator role (a
frozen copy of its line in ``operators.roles``)."""

from django.db import migrations

CODENAME = "suspend_licences"
NAME = "Suspend and reinstate licences, batch keys and customers"
ROLES = ["operator"]


def add_capability(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    content_type, _ = ContentType.objects.get_or_create(app_label="operators", model="capability")
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename=CODENAME, defaults={"name": NAME}
    )
    for group in Group.objects.filter(name__in=ROLES):
        group.permissions.add(permission)


def remove_capability(apps, schema_editor):
    apps.get_model("auth", "Permission").objects.filter(codename=CODENAME).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('operators', '0002_roles_and_scoped_keys'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='capability',
            options={'default_permissions': (), 'managed': False, 'permissions': [('view_service', 'Read customers, fleet, licences, billing, events and the audit log'), ('release_seats', 'Release a batch seat so another device may take it'), ('renew_licences', 'Renew batches and direct licences for another term'), ('manage_customers', 'Create and edit customers'), ('issue_licences', 'Issue batches and direct licences'), ('revoke_licences', 'Revoke licences, unit licences and batch keys'), ('suspend_licences', 'Suspend and reinstate licences, batch keys and customers'), ('manage_webhooks', 'Create, change, rotate and redeliver webhook endpoints'), ('manage_billing', 'Issue invoices and credit notes; exports and reconciliation'), ('manage_signing_keys', 'Install, retire and revoke signing keys'), ('manage_operator_access', 'Create and revoke operator API keys'), ('reset_second_factors', "Reset another console user's second factor")]},
        ),
        migrations.RunPython(add_capability, remove_capability),
    ]
