"""Agenda progress: `has_waiters`, so a finish looks for waiters only when something waits."""

from django.db import migrations, models

MARK_WAITED_FOR = """
UPDATE agendas_agendaprogress SET has_waiters = true
WHERE agenda_id IN (
    SELECT upstream_id FROM agendas_agendadependency WHERE finished_at IS NULL
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0020_agenda_side_rows_without_database_constraints"),
    ]

    operations = [
        migrations.AddField(
            model_name="agendaprogress",
            name="has_waiters",
            field=models.BooleanField(default=False, db_default=False, editable=False),
        ),
        # Agendas already waited for keep releasing their waiters.
        migrations.RunSQL(MARK_WAITED_FOR, migrations.RunSQL.noop),
    ]
