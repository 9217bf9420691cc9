"""Refusals on the record: a refusal's key name, capability and status; ``repeats``
(identical refusals of one clock minute on one row) and the ``fingerprint`` that finds
that row. The history is brought in line: wrong and throttled operator keys, stored as
"failed", become "refused", and a throttled row's ``detail.count`` its ``repeats``."""

import logging

from django.db import DatabaseError, migrations, models, transaction

WRONG_KEYS = ("admin_key.refused", "admin_key.throttled")
log = logging.getLogger(__name__)


def refusals_refused(apps, schema_editor):
    """Relabel the history. Where the log is already append-only (PostgreSQL, billing
    0013 applied first) the database refuses the change: the history then keeps its
    labels, and the migration goes on (it must never stop an upgrade)."""
    AuditEntry = apps.get_model("audit", "AuditEntry")
    rows = AuditEntry.objects.filter(action__in=WRONG_KEYS, result="failed")
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            for row in rows.filter(action="admin_key.throttled").iterator():
                count = row.detail.get("count") if isinstance(row.detail, dict) else None
                if isinstance(count, int) and count > 1:
                    AuditEntry.objects.filter(pk=row.pk).update(repeats=count)
            rows.update(result="refused")
    except DatabaseError as exc:
        log.warning("audit history kept as it was (the log is append-only): %s", exc)


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0006_actor_customer'),
    ]

    operations = [
        migrations.AddField(
            model_name='auditentry',
            name='capability',
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name='auditentry',
            name='fingerprint',
            field=models.CharField(blank=True, editable=False, max_length=64, null=True, unique=True),
        ),
        migrations.AddField(
            model_name='auditentry',
            name='key_name',
            field=models.CharField(blank=True, db_index=True, max_length=150),
        ),
        migrations.AddField(
            model_name='auditentry',
            name='repeats',
            field=models.PositiveIntegerField(default=1),
        ),
        migrations.AddField(
            model_name='auditentry',
            name='status',
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='auditentry',
            name='actor_kind',
            field=models.CharField(choices=[('api_key', 'API key'), ('staff', 'Staff (admin console)'), ('superuser', 'Superuser (admin console, every permission)'), ('customer', 'Customer user (portal)'), ('customer_key', 'Customer API key'), ('device', 'Camera (device API)'), ('cli', 'Command line (manage.py)'), ('system', 'System')], max_length=16),
        ),
        migrations.AddConstraint(
            model_name='auditentry',
            constraint=models.CheckConstraint(condition=models.Q(('repeats__gte', 1)), name='audit_repeats_positive'),
        ),
        migrations.AlterField(
            model_name='auditentry',
            name='result',
            field=models.CharField(choices=[('ok', 'ok'), ('failed', 'failed'), ('refused', 'refused')], max_length=8),
        ),
        migrations.RunPython(refusals_refused, migrations.RunPython.noop),
    ]
