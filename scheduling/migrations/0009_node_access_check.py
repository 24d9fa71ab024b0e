# Inventory's access check holds back nodes that lack their mode's resources, and records the
# GPU resources pods the portal did not create hold on each node.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0008_runtime_models_move'),
    ]

    operations = [
        migrations.AddField(
            model_name='node',
            name='held_back_reason',
            field=models.TextField(blank=True, help_text="Why the engine places nothing here although the node is up: it does not advertise the resources of its pool's sharing mode (inventory's access check)."),
        ),
        migrations.AddField(
            model_name='node',
            name='foreign_usage',
            field=models.JSONField(blank=True, default=dict, help_text='GPU resources held by pods the portal did not create, e.g. {"nvidia.com/gpu": 2}; subtracted from what the engine sees free.'),
        ),
    ]
