import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# Monthly rollup rows are updated by every batch of their month: room on the page lets
# PostgreSQL update them in place (HOT) without touching their indexes.
FILLFACTOR_TABLES = ("accounting_monthlyusage", "accounting_teammonthlyusage")


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in FILLFACTOR_TABLES:
            schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = 70)")


def unset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in FILLFACTOR_TABLES:
            schema_editor.execute(f"ALTER TABLE {table} RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("accounting", "0002_usage_ledger"),
        ("scheduling", "0002_execution"),
        ("tenants", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="dailyusage",
            name="flavor",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.flavor",
            ),
        ),
        migrations.AlterField(
            model_name="dailyusage",
            name="pool",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.nodepool",
            ),
        ),
        migrations.AlterField(
            model_name="dailyusage",
            name="project",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tenants.project",
            ),
        ),
        migrations.AlterField(
            model_name="dailyusage",
            name="team",
            field=models.ForeignKey(
                db_constraint=False,
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
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.flavor",
            ),
        ),
        migrations.AlterField(
            model_name="monthlyusage",
            name="pool",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.nodepool",
            ),
        ),
        migrations.AlterField(
            model_name="monthlyusage",
            name="project",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tenants.project",
            ),
        ),
        migrations.AlterField(
            model_name="monthlyusage",
            name="team",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tenants.team",
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="allocation",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="usage_records",
                to="scheduling.allocation",
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="flavor",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.flavor",
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="owner",
            field=models.ForeignKey(
                db_constraint=False,
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
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.nodepool",
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="project",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tenants.project",
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="team",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tenants.team",
            ),
        ),
        migrations.CreateModel(
            name="TeamMonthlyUsage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("period", models.DateField(help_text="First day of the billing month.")),
                ("gpu_hours", models.DecimalField(decimal_places=6, max_digits=18)),
                ("cost", models.DecimalField(decimal_places=6, max_digits=18)),
                (
                    "flavor",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="scheduling.flavor",
                    ),
                ),
                (
                    "pool",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="scheduling.nodepool",
                    ),
                ),
                (
                    "team",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="tenants.team",
                    ),
                ),
            ],
            options={
                "ordering": ["-period", "team_id", "flavor_id"],
            },
        ),
        migrations.AddConstraint(
            model_name="teammonthlyusage",
            constraint=models.UniqueConstraint(
                fields=("period", "team", "flavor", "pool"),
                name="team_monthly_usage_one_per_key",
                violation_error_message="This month already has a row for this key.",
            ),
        ),
        migrations.RunPython(set_fillfactor, unset_fillfactor),
    ]
