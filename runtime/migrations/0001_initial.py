# The simulated cluster's workloads and the task failure counts move here from `scheduling`:
# the models are created in this app's state and their tables renamed, keeping their rows.

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('scheduling', '0007_request_list_indexes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='TaskFailureCount',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('task_name', models.CharField(max_length=200, unique=True)),
                        ('failures', models.PositiveIntegerField(default=0)),
                        ('last_failed_at', models.DateTimeField(blank=True, null=True)),
                        ('last_error', models.TextField(blank=True)),
                    ],
                ),
                migrations.CreateModel(
                    name='SimulatedWorkload',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('namespace', models.CharField(max_length=63)),
                        ('name', models.CharField(max_length=63)),
                        ('request_key', models.CharField(max_length=40)),
                        ('attempt', models.PositiveIntegerField()),
                        ('kind', models.CharField(max_length=10)),
                        ('team_slug', models.CharField(max_length=63)),
                        ('project_slug', models.CharField(max_length=63)),
                        ('node_name', models.CharField(blank=True, max_length=253)),
                        ('created_at', models.DateTimeField()),
                        ('starts_at', models.DateTimeField()),
                        ('ends_at', models.DateTimeField()),
                        ('fails', models.BooleanField(default=False)),
                        ('failure_reason', models.CharField(blank=True, max_length=60)),
                        ('utilisation_percent', models.PositiveSmallIntegerField(default=80)),
                    ],
                    options={
                        'ordering': ['created_at'],
                        'constraints': [models.UniqueConstraint(fields=('namespace', 'name'), name='simulated_workload_name_unique', violation_error_message='A workload with this name already exists here.')],
                    },
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'ALTER TABLE "scheduling_taskfailurecount" RENAME TO "runtime_taskfailurecount"',
                    'ALTER TABLE "runtime_taskfailurecount" RENAME TO "scheduling_taskfailurecount"',
                ),
                migrations.RunSQL(
                    'ALTER TABLE "scheduling_simulatedworkload" RENAME TO "runtime_simulatedworkload"',
                    'ALTER TABLE "runtime_simulatedworkload" RENAME TO "scheduling_simulatedworkload"',
                ),
            ],
        ),
    ]
