# ?template= by (template, customer, -created_at) (issue 18): a global template's agendas
# belong to many customers, and by the template alone a customer's filtered count read every
# customer's. The new index leads with the template, so the foreign key's own index goes. The
# constraint stays as it is (Django's AlterField would drop and re-validate it over every
# agenda). Plain CREATE INDEX in the migration's transaction: submits wait while it builds. On
# a large live table, build it beforehand with CREATE INDEX CONCURRENTLY (same name, columns
# and order), drop the old one with DROP INDEX CONCURRENTLY "agendas_agenda_template_id_18b12b6d",
# then apply this migration with --fake.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0024_operation_state_and_name_indexes"),
        ("resourcepools", "0005_fair_share_default"),
        ("scheduling", "0005_schedule_template_version"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="agenda",
            index=models.Index(
                fields=["template", "customer", "-created_at"], name="agenda_template"
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="agenda",
                    name="template",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="agendas",
                        to="agendas.agendatemplate",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "agendas_agenda_template_id_18b12b6d"',
                    reverse_sql='CREATE INDEX "agendas_agenda_template_id_18b12b6d" '
                    'ON "agendas_agenda" ("template_id")',
                ),
            ],
        ),
    ]
