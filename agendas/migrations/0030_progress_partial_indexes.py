"""Two progress indexes hold only the rows they are asked about (docs/decisions.md, "Two
progress indexes hold only the rows they are asked about"):

- `progress_state_run_after` (state, run_after) becomes `progress_pending_run_after`
  (run_after) WHERE state = 'pending': the promote asks for pending rows by `run_after`, and
  nothing else asks for this index (the state-led queries have `progress_state_completed`);
- the foreign-key index of `current_execution` becomes `progress_current_execution`, WHERE
  current_execution_id IS NOT NULL: only an executing row points at an execution, and the only
  question is Django's SET_NULL when executions are deleted through the ORM.

A progress row's updates are never HOT (its `state` is indexed), so every index of the table
was written at each step of every agenda; these two are now written once, at the claim.

On a large live database (docs/deploy.md, "Upgrading a large live database") build them first:
  CREATE INDEX CONCURRENTLY progress_pending_run_after ON agendas_agendaprogress (run_after)
      WHERE state = 'pending';
  CREATE INDEX CONCURRENTLY progress_current_execution ON agendas_agendaprogress
      (current_execution_id) WHERE current_execution_id IS NOT NULL;
  DROP INDEX CONCURRENTLY progress_state_run_after;
  DROP INDEX CONCURRENTLY agendas_agendaprogress_current_execution_id_42b05f34;
then `manage.py migrate agendas 0030 --fake`.
"""

import django.db.models.deletion
from django.db import migrations, models

# Django's name for the foreign key's index when it made it.
CURRENT_EXECUTION_INDEX = "agendas_agendaprogress_current_execution_id_42b05f34"


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0029_covered_foreign_key_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="agendaprogress", name="progress_state_run_after"),
        migrations.AddIndex(
            model_name="agendaprogress",
            index=models.Index(
                condition=models.Q(("state", "pending")),
                fields=["run_after"],
                name="progress_pending_run_after",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="agendaprogress",
                    name="current_execution",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="agendas.execution",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX IF EXISTS "{CURRENT_EXECUTION_INDEX}"',
                    reverse_sql=(
                        f'CREATE INDEX IF NOT EXISTS "{CURRENT_EXECUTION_INDEX}" '
                        'ON "agendas_agendaprogress" ("current_execution_id")'
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="agendaprogress",
            index=models.Index(
                condition=models.Q(("current_execution__isnull", False)),
                fields=["current_execution"],
                name="progress_current_execution",
            ),
        ),
    ]
