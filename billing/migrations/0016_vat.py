"""VAT (issue 43): the customer-independent half. Issued documents gain their tax total
and the buyer's country and VAT id at issue; their VAT breakdown (``billing_invoicetax``)
is written once like their lines (on PostgreSQL a trigger refuses UPDATE and DELETE, and
TRUNCATE, as migrations 0003 and 0009 do for the other document tables); the VAT rate
table is seeded with the EU member states' standard rates from 2024-01-01, with the
changes since (EE, FI, SK, RO). The operator edits the table in the console.

Adding the columns writes no row: existing documents read tax 0 and no breakdown (issued
before VAT), and the immutability triggers do not fire on ALTER TABLE.
"""

import datetime as dt
from decimal import Decimal

import django.db.models.deletion
from django.db import migrations, models

# (country, rate, valid_from, valid_to): standard rates of the 27 member states.
RATES = [
    ("AT", "20", "2024-01-01", None), ("BE", "21", "2024-01-01", None),
    ("BG", "20", "2024-01-01", None), ("CY", "19", "2024-01-01", None),
    ("CZ", "21", "2024-01-01", None), ("DE", "19", "2024-01-01", None),
    ("DK", "25", "2024-01-01", None),
    ("EE", "22", "2024-01-01", "2025-06-30"), ("EE", "24", "2025-07-01", None),
    ("ES", "21", "2024-01-01", None),
    ("FI", "24", "2024-01-01", "2024-08-31"), ("FI", "25.5", "2024-09-01", None),
    ("FR", "20", "2024-01-01", None), ("GR", "24", "2024-01-01", None),
    ("HR", "25", "2024-01-01", None), ("HU", "27", "2024-01-01", None),
    ("IE", "23", "2024-01-01", None), ("IT", "22", "2024-01-01", None),
    ("LT", "21", "2024-01-01", None), ("LU", "17", "2024-01-01", None),
    ("LV", "21", "2024-01-01", None), ("MT", "18", "2024-01-01", None),
    ("NL", "21", "2024-01-01", None), ("PL", "23", "2024-01-01", None),
    ("PT", "23", "2024-01-01", None),
    ("RO", "19", "2024-01-01", "2025-07-31"), ("RO", "21", "2025-08-01", None),
    ("SE", "25", "2024-01-01", None), ("SI", "22", "2024-01-01", None),
    ("SK", "20", "2024-01-01", "2024-12-31"), ("SK", "23", "2025-01-01", None),
]  # fmt: skip


def seed(apps, schema_editor):
    VatRate = apps.get_model("billing", "VatRate")
    VatRate.objects.bulk_create(
        VatRate(
            country=country,
            rate=Decimal(rate),
            valid_from=dt.date.fromisoformat(start),
            valid_to=dt.date.fromisoformat(end) if end else None,
        )
        for country, rate, start, end in RATES
    )


def unseed(apps, schema_editor):
    apps.get_model("billing", "VatRate").objects.all().delete()


def guard(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run(
        "CREATE TRIGGER billing_invoicetax_immutable BEFORE UPDATE OR DELETE ON "
        "billing_invoicetax FOR EACH ROW EXECUTE FUNCTION billing_issued_immutable()"
    )
    run(
        "CREATE TRIGGER billing_invoicetax_no_truncate BEFORE TRUNCATE ON billing_invoicetax "
        "FOR EACH STATEMENT EXECUTE FUNCTION billing_guard_truncate()"
    )


def unguard(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run("DROP TRIGGER IF EXISTS billing_invoicetax_no_truncate ON billing_invoicetax")
    run("DROP TRIGGER IF EXISTS billing_invoicetax_immutable ON billing_invoicetax")


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0015_addons'),
    ]

    operations = [
        migrations.AddField(
            model_name='invoice',
            name='buyer_country',
            field=models.CharField(blank=True, db_default='', default='', max_length=2),
        ),
        migrations.AddField(
            model_name='invoice',
            name='buyer_vat_id',
            field=models.CharField(blank=True, db_default='', default='', max_length=32),
        ),
        migrations.AddField(
            model_name='invoice',
            name='tax_total',
            field=models.DecimalField(db_default=0, decimal_places=3, default=0, max_digits=18),
        ),
        migrations.CreateModel(
            name='VatRate',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('country', models.CharField(help_text='ISO 3166 alpha-2 code.', max_length=2)),
                ('rate', models.DecimalField(decimal_places=2, help_text='Percent, e.g. 19.00 for 19 %.', max_digits=5)),
                ('valid_from', models.DateField()),
                ('valid_to', models.DateField(blank=True, help_text='Last day; empty: open.', null=True)),
            ],
            options={
                'verbose_name': 'VAT rate',
                'ordering': ['country', '-valid_from'],
                'constraints': [models.UniqueConstraint(fields=('country', 'valid_from'), name='vat_rate_once'), models.CheckConstraint(condition=models.Q(('rate__gte', 0), ('rate__lt', 100)), name='vat_rate_percent'), models.CheckConstraint(condition=models.Q(('valid_to__isnull', True), ('valid_to__gte', models.F('valid_from')), _connector='OR'), name='vat_rate_span')],
            },
        ),
        migrations.CreateModel(
            name='InvoiceTax',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('category', models.CharField(choices=[('S', 'Standard rate'), ('AE', 'Reverse charge'), ('E', 'Exempt from VAT'), ('O', 'Not subject to VAT')], max_length=2)),
                ('rate', models.DecimalField(decimal_places=2, max_digits=5)),
                ('taxable_amount', models.DecimalField(decimal_places=3, max_digits=18)),
                ('tax_amount', models.DecimalField(decimal_places=3, max_digits=18)),
                ('exemption_code', models.CharField(blank=True, help_text='VATEX code (categories AE, E, O).', max_length=32)),
                ('exemption_reason', models.CharField(blank=True, max_length=300)),
                ('invoice', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='taxes', to='billing.invoice')),
            ],
            options={
                'verbose_name': 'invoice tax',
                'ordering': ['invoice', 'category', 'rate'],
                'verbose_name_plural': 'invoice taxes',
                'constraints': [models.UniqueConstraint(fields=('invoice', 'category', 'rate'), name='invoice_tax_once')],
            },
        ),
        migrations.RunPython(seed, unseed),
        migrations.RunPython(guard, unguard),
    ]
