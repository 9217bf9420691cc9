import config.clock
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('licensing', '0008_renewal_units_in_service'),
    ]

    # A Python default (config.clock.now, the server clock tests move) never reaches the
    # database: state only. On SQLite an AlterField would rebuild the table and drop the
    # triggers kept on it (activation rollups, billing guards).
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='activation',
                    name='activated_at',
                    field=models.DateTimeField(default=config.clock.now),
                ),
                migrations.AlterField(
                    model_name='batch',
                    name='issued_at',
                    field=models.DateTimeField(default=config.clock.now),
                ),
                migrations.AlterField(
                    model_name='license',
                    name='issued_at',
                    field=models.DateTimeField(default=config.clock.now),
                ),
                migrations.AlterField(
                    model_name='seatrelease',
                    name='released_at',
                    field=models.DateTimeField(default=config.clock.now),
                ),
                migrations.AlterField(
                    model_name='signingkey',
                    name='created_at',
                    field=models.DateTimeField(default=config.clock.now),
                ),
            ],
            database_operations=[],
        ),
    ]
