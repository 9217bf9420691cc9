import config.clock
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0003_operator_keys_move_to_operators'),
    ]

    # A Python default (config.clock.now, the server clock tests move) never reaches the
    # database: state only. On SQLite an AlterField would rebuild the table and drop the
    # triggers kept on it (activation rollups, billing guards).
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='auditentry',
                    name='at',
                    field=models.DateTimeField(db_index=True, default=config.clock.now),
                ),
            ],
            database_operations=[],
        ),
    ]
