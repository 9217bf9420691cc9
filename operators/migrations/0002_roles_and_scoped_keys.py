"""Roles: the capabilities as permissions and the five roles as Django groups holding
them (a frozen copy of ``operators.roles``; tests/operators/test_roles.py checks the
database against the live table). Operator keys gain roles and an expiry; the keys made
before roles existed could do everything, and keep every role."""

from django.db import migrations, models

CAPABILITIES = {
    "view_service": "Read customers, fleet, licences, billing, events and the audit log",
    "release_seats": "Release a batch seat so another device may take it",
    "renew_licences": "Renew batches and direct licences for another term",
    "manage_customers": "Create and edit customers",
    "issue_licences": "Issue batches and direct licences",
    "revoke_licences": "Revoke licences, unit licences and batch keys",
    "manage_webhooks": "Create, change, rotate and redeliver webhook endpoints",
    "manage_billing": "Issue invoices and credit notes; exports and reconciliation",
    "manage_signing_keys": "Install, retire and revoke signing keys",
    "manage_operator_access": "Create and revoke operator API keys",
    "reset_second_factors": "Reset another console user's second factor",
}
ROLES = {
    "viewer": ["view_service"],
    "support": ["view_service", "release_seats", "renew_licences"],
    "operator": [
        "view_service", "manage_customers", "issue_licences", "revoke_licences",
        "renew_licences", "release_seats", "manage_webhooks",
    ],
    "finance": ["view_service", "manage_billing"],
    "key-admin": [
        "view_service", "manage_signing_keys", "manage_operator_access", "reset_second_factors",
    ],
}


def create_roles(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    OperatorKey = apps.get_model("operators", "OperatorKey")
    content_type, _ = ContentType.objects.get_or_create(app_label="operators", model="capability")
    permissions = {}
    for codename, name in CAPABILITIES.items():
        permissions[codename], _ = Permission.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
    for role, held in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.add(*(permissions[codename] for codename in held))
    OperatorKey.objects.update(roles=list(ROLES))


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('operators', '0001_initial'),
        ('auth', '0012_alter_user_first_name_max_length'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.CreateModel(
            name='Capability',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ],
            options={
                'permissions': list(CAPABILITIES.items()),
                'managed': False,
                'default_permissions': (),
            },
        ),
        migrations.AddField(
            model_name='operatorkey',
            name='expires_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='operatorkey',
            name='roles',
            field=models.JSONField(default=list),
        ),
        migrations.RunPython(create_roles, remove_roles),
    ]
