"""Drop the four foreign-key indexes that a composite index leading with the same column
already covers (docs/decisions.md, "The hot tables keep no index another one covers"):
executions by agenda (`execution_number_per_agenda` is (agenda, number)), operations by
progress (`operation_name_per_agenda` is (agenda_progress, name)), ready and queued rows by
insight (`ready_fair_order`, `ready_fifo_order`, `queue_order` lead with insight).

Only the indexes go: Django's own AlterField would also drop and re-add the queue tables'
foreign keys, and re-adding one validates every row of the table under a lock that stops
writes. Dropping an index is quick on any table; the reverse builds them again."""

import django.db.models.deletion
from django.db import migrations, models

# (index, table, column) as Django named them when it made the foreign keys.
COVERED = [
    ("agendas_execution_agenda_id_ea90cb63", "agendas_execution", "agenda_id"),
    (
        "agendas_operationprogress_agenda_progress_id_974e9266",
        "agendas_operationprogress",
        "agenda_progress_id",
    ),
    ("scheduling_queuedagenda_insight_id_f0e6038e", "scheduling_queuedagenda", "insight_id"),
    ("scheduling_readyagenda_insight_id_fd45aa6b", "scheduling_readyagenda", "insight_id"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0028_progress_last_execution_number"),
        ("resourcepools", "0005_fair_share_default"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="execution",
                    name="agenda",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="executions",
                        to="agendas.agenda",
                    ),
                ),
                migrations.AlterField(
                    model_name="operationprogress",
                    name="agenda_progress",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="operations",
                        to="agendas.agendaprogress",
                    ),
                ),
                migrations.AlterField(
                    model_name="queuedagenda",
                    name="insight",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="queued_agendas",
                        to="resourcepools.insight",
                    ),
                ),
                migrations.AlterField(
                    model_name="readyagenda",
                    name="insight",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="ready_agendas",
                        to="resourcepools.insight",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX IF EXISTS "{index}"',
                    reverse_sql=f'CREATE INDEX IF NOT EXISTS "{index}" ON "{table}" ("{column}")',
                )
                for index, table, column in COVERED
            ],
        ),
    ]
