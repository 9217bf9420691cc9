from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('licensing', '0009_times_by_the_server_clock'),
    ]

    # Help text only: state, no SQL (an AlterField would rebuild the table on SQLite and
    # drop its triggers).
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='batch',
                    name='released_seats',
                    field=models.PositiveIntegerField(default=0, help_text='Seats released by an operator (dead or replaced cameras) and not yet taken again: the next activations on them are transfers, not billed again. Always at most the units remaining (licensing.services.seats keeps it so at every commit).'),
                ),
            ],
            database_operations=[],
        ),
    ]
