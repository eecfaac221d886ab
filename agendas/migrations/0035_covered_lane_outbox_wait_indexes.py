"""Drop three more foreign-key indexes that a composite index leading with the same column
already covers (docs/decisions.md, "The hot tables keep no index another one covers"): lanes
by insight (`lane_of_customer` is (insight, customer); a fill rewrites the lane of every
customer it serves, never HOT, as `served` is in `lane_turn_order`), callback deliveries by
agenda (`callback_agenda_order` is (agenda, id); a delivery is written at its state change
and again when delivered) and an agenda's upstream links by waiter (`agenda_dependency_once`
is (waiter, upstream)).

Only the indexes go, as in 0029: the lanes' insight constraint stays. Dropping an index is
quick on any table (on a large live one, `DROP INDEX CONCURRENTLY` each first, then
`manage.py migrate agendas 0035 --fake`); the reverse builds them again."""

import django.db.models.deletion
from django.db import migrations, models

# (index, table, column) as Django named them when it made the foreign keys.
COVERED = [
    ("scheduling_customerlane_insight_id_4ab7d67f", "scheduling_customerlane", "insight_id"),
    (
        "scheduling_callbackdelivery_agenda_id_21980546",
        "scheduling_callbackdelivery",
        "agenda_id",
    ),
    ("agendas_agendadependency_waiter_id_521d3137", "agendas_agendadependency", "waiter_id"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0034_callback_list_indexes"),
        ("resourcepools", "0005_fair_share_default"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="customerlane",
                    name="insight",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="customer_lanes",
                        to="resourcepools.insight",
                    ),
                ),
                migrations.AlterField(
                    model_name="callbackdelivery",
                    name="agenda",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="callback_deliveries",
                        to="agendas.agenda",
                    ),
                ),
                migrations.AlterField(
                    model_name="agendadependency",
                    name="waiter",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="upstream_links",
                        to="agendas.agenda",
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
