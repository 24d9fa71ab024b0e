# SimulatedWorkload and TaskFailureCount now belong to `runtime` (its 0001 renames the tables).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0007_request_list_indexes'),
        ('runtime', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='SimulatedWorkload'),
                migrations.DeleteModel(name='TaskFailureCount'),
            ],
            database_operations=[],
        ),
    ]
