"""The ledger and the rollups get real foreign keys that PROTECT team, project, flavor, pool
and owner, each the leading column of some index (a delete looks rows up by it).

Adding the constraints checks the existing rows: a row naming a deleted object stops the
migration (see docs/accounting.md, "Foreign keys", for the query that finds such rows).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounting", "0007_daily_usage_one_index"),
        ("scheduling", "0009_node_access_check"),
        ("tenants", "0002_audit_append_only"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="dailyusage",
            name="flavor",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.flavor",
            ),
        ),
        migrations.AlterField(
            model_name="dailyusage",
            name="pool",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.nodepool",
            ),
        ),
        migrations.AlterField(
            model_name="dailyusage",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenants.project"
            ),
        ),
        migrations.AlterField(
            model_name="dailyusage",
            name="team",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tenants.team",
            ),
        ),
        migrations.AlterField(
            model_name="monthlyusage",
            name="flavor",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.flavor",
            ),
        ),
        migrations.AlterField(
            model_name="monthlyusage",
            name="pool",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.nodepool",
            ),
        ),
        migrations.AlterField(
            model_name="monthlyusage",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenants.project"
            ),
        ),
        migrations.AlterField(
            model_name="monthlyusage",
            name="team",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenants.team"
            ),
        ),
        migrations.AlterField(
            model_name="teammonthlyusage",
            name="flavor",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.flavor",
            ),
        ),
        migrations.AlterField(
            model_name="teammonthlyusage",
            name="pool",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.nodepool",
            ),
        ),
        migrations.AlterField(
            model_name="teammonthlyusage",
            name="team",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenants.team"
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="flavor",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.flavor",
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="owner",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="pool",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.nodepool",
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenants.project"
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="team",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tenants.team",
            ),
        ),
    ]
