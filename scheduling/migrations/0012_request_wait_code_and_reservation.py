from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0011_request_name_and_templates"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpurequest",
            name="waiting_code",
            field=models.CharField(blank=True, max_length=12),
        ),
        migrations.AddField(
            model_name="gpurequest",
            name="reserved_start_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
