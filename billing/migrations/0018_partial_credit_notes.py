# Partial credit notes (issue 43 item 4): several credit notes per invoice, kept data.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0017_line_kinds_of_trials_and_addons'),
    ]

    operations = [
        migrations.AddField(
            model_name='invoice',
            name='partial',
            field=models.BooleanField(db_default=False, default=False, help_text="A credit note of chosen lines or quantities, or of what earlier credit notes left: the credited invoice's period stands."),
        ),
        migrations.AddField(
            model_name='invoice',
            name='price_only',
            field=models.BooleanField(db_default=False, default=False, help_text='A credit note of price only: the events its lines billed stay billed (no re-billing).'),
        ),
        migrations.AddField(
            model_name='invoiceline',
            name='credited_line',
            field=models.PositiveIntegerField(blank=True, help_text="On a credit note: the position of the credited invoice's line (empty on credit notes issued before partial credits, whose lines match the invoice's position by position).", null=True),
        ),
        migrations.AlterField(
            model_name='invoice',
            name='credits',
            field=models.ForeignKey(blank=True, help_text='The invoice a credit note credits.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='credit_notes', to='billing.invoice'),
        ),
    ]
