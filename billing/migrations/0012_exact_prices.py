"""Amounts to the currency's minor unit (issue 38, contract §6): invoice totals and line
amounts widen from numeric(16,2) to numeric(18,3) (KWD's fils), ledger entries' unit
prices from numeric(12,2) to numeric(14,4), the precision the catalogue allows. Widening
keeps every stored value: no issued amount changes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0011_invoice_per_currency'),
    ]

    operations = [
        migrations.AlterField(
            model_name='invoice',
            name='total',
            field=models.DecimalField(decimal_places=3, max_digits=18),
        ),
        migrations.AlterField(
            model_name='invoiceline',
            name='amount',
            field=models.DecimalField(decimal_places=3, max_digits=18),
        ),
        migrations.AlterField(
            model_name='ledgerentry',
            name='unit_price',
            field=models.DecimalField(blank=True, decimal_places=4, max_digits=14, null=True),
        ),
    ]
