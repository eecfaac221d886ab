import django.db.models.deletion
from django.db import migrations, models

# The history tables drop the indexes no query reads (docs/decisions.md, "The history tables
# keep one index per question"): the `varchar_pattern_ops` twins Django builds beside an indexed
# varchar on PostgreSQL (no LIKE is ever made on these columns) and the plain customer and
# insight indexes that a composite index already leads with. The plain link_id, cid and
# external_id indexes stay, renamed to the names the models now declare: on PostgreSQL this is a
# DROP and a RENAME, not a rebuild, so it takes no time on a long history.
RENAMED = [  # (table, column, Django's name for its db_index, the declared name)
    ("agendas_agenda", "link_id", "agendas_agenda_link_id_cdf65e67", "agenda_link_id"),
    ("agendas_agenda", "cid", "agendas_agenda_cid_666a41bd", "agenda_cid"),
    ("agendas_agenda", "external_id", "agendas_agenda_external_id_52120652", "agenda_external_id"),
    (
        "agendas_agendaprogress",
        "link_id",
        "agendas_agendaprogress_link_id_946277ac",
        "progress_link_id",
    ),
    ("agendas_agendaprogress", "cid", "agendas_agendaprogress_cid_da98abee", "progress_cid"),
    ("agendas_execution", "link_id", "agendas_execution_link_id_6beb248e", "execution_link_id"),
    (
        "agendas_operationprogress",
        "link_id",
        "agendas_operationprogress_link_id_170449a1",
        "operation_link_id",
    ),
]
DROPPED = [  # (table, column, Django's name for its db_index)
    ("agendas_agenda", "customer_id", "agendas_agenda_customer_id_911fc14d"),
    ("agendas_agendaprogress", "customer_id", "agendas_agendaprogress_customer_id_56869560"),
    ("agendas_execution", "customer_id", "agendas_execution_customer_id_e9f1b463"),
    ("agendas_execution", "insight_id", "agendas_execution_insight_id_180e0d87"),
    ("agendas_operationprogress", "customer_id", "agendas_operationprogress_customer_id_28af7870"),
]


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement)


def forwards(apps, schema_editor):
    postgresql = schema_editor.connection.vendor == "postgresql"
    statements = [f'DROP INDEX IF EXISTS "{name}"' for _, _, name in DROPPED]
    for table, column, old, new in RENAMED:
        if postgresql:
            statements += [
                f'DROP INDEX IF EXISTS "{old}_like"',
                f'ALTER INDEX IF EXISTS "{old}" RENAME TO "{new}"',
            ]
        else:  # SQLite renames no index: build it again (a demo database)
            statements.append(f'DROP INDEX IF EXISTS "{old}"')
        statements.append(f'CREATE INDEX IF NOT EXISTS "{new}" ON "{table}" ("{column}")')
    _run(schema_editor, statements)


def backwards(apps, schema_editor):
    postgresql = schema_editor.connection.vendor == "postgresql"
    statements = [
        f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" ("{column}")'
        for table, column, name in DROPPED
    ]
    for table, column, old, new in RENAMED:
        statements += [
            f'DROP INDEX IF EXISTS "{new}"',
            f'CREATE INDEX IF NOT EXISTS "{old}" ON "{table}" ("{column}")',
        ]
        if postgresql:
            statements.append(
                f'CREATE INDEX IF NOT EXISTS "{old}_like" ON "{table}" '
                f'("{column}" varchar_pattern_ops)'
            )
    _run(schema_editor, statements)


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0025_agenda_template_index"),
        ("resourcepools", "0005_fair_share_default"),
        ("scheduling", "0005_schedule_template_version"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="agenda",
                    name="cid",
                    field=models.CharField(
                        blank=True,
                        default="",
                        help_text="Correlation id (X-POP-CID).",
                        max_length=64,
                    ),
                ),
                migrations.AlterField(
                    model_name="agenda",
                    name="customer",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="agendas",
                        to="resourcepools.customer",
                    ),
                ),
                migrations.AlterField(
                    model_name="agenda",
                    name="external_id",
                    field=models.CharField(blank=True, default="", max_length=255),
                ),
                migrations.AlterField(
                    model_name="agenda",
                    name="link_id",
                    field=models.CharField(
                        blank=True,
                        default="",
                        help_text="Client-chosen grouping key.",
                        max_length=255,
                    ),
                ),
                migrations.AlterField(
                    model_name="agendaprogress",
                    name="cid",
                    field=models.CharField(
                        blank=True,
                        default="",
                        help_text="Correlation id (X-POP-CID).",
                        max_length=64,
                    ),
                ),
                migrations.AlterField(
                    model_name="agendaprogress",
                    name="customer",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="agenda_progress",
                        to="resourcepools.customer",
                    ),
                ),
                migrations.AlterField(
                    model_name="agendaprogress",
                    name="link_id",
                    field=models.CharField(
                        blank=True,
                        default="",
                        help_text="Client-chosen grouping key.",
                        max_length=255,
                    ),
                ),
                migrations.AlterField(
                    model_name="execution",
                    name="customer",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="executions",
                        to="resourcepools.customer",
                    ),
                ),
                migrations.AlterField(
                    model_name="execution",
                    name="insight",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="executions",
                        to="resourcepools.insight",
                    ),
                ),
                migrations.AlterField(
                    model_name="execution",
                    name="link_id",
                    field=models.CharField(
                        blank=True,
                        default="",
                        help_text="Client-chosen grouping key.",
                        max_length=255,
                    ),
                ),
                migrations.AlterField(
                    model_name="operationprogress",
                    name="customer",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="operation_progress",
                        to="resourcepools.customer",
                    ),
                ),
                migrations.AlterField(
                    model_name="operationprogress",
                    name="link_id",
                    field=models.CharField(
                        blank=True,
                        default="",
                        help_text="Client-chosen grouping key.",
                        max_length=255,
                    ),
                ),
                migrations.AddIndex(
                    model_name="agenda",
                    index=models.Index(fields=["link_id"], name="agenda_link_id"),
                ),
                migrations.AddIndex(
                    model_name="agenda",
                    index=models.Index(fields=["cid"], name="agenda_cid"),
                ),
                migrations.AddIndex(
                    model_name="agenda",
                    index=models.Index(fields=["external_id"], name="agenda_external_id"),
                ),
                migrations.AddIndex(
                    model_name="agendaprogress",
                    index=models.Index(fields=["link_id"], name="progress_link_id"),
                ),
                migrations.AddIndex(
                    model_name="agendaprogress",
                    index=models.Index(fields=["cid"], name="progress_cid"),
                ),
                migrations.AddIndex(
                    model_name="execution",
                    index=models.Index(fields=["link_id"], name="execution_link_id"),
                ),
                migrations.AddIndex(
                    model_name="operationprogress",
                    index=models.Index(fields=["link_id"], name="operation_link_id"),
                ),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
