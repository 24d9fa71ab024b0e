# A simulated job carries its deadline (the Job's activeDeadlineSeconds) so an extension moves it.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runtime', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='simulatedworkload',
            name='deadline_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
