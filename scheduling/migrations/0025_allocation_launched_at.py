from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0024_node_mig_layout_problem'),
    ]

    operations = [
        migrations.AddField(
            model_name='allocation',
            name='launched_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
