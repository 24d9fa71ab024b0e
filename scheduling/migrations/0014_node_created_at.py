import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0013_project_data_and_host_resources"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="created_at",
            field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
        ),
    ]
