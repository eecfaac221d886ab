"""Agenda progress: `last_execution_number`, so a claim numbers an agenda's next execution
without reading its executions (docs/decisions.md, "The claim reads no execution")."""

from django.db import migrations, models

# Agendas that ran before keep numbering from their highest execution. One statement over the
# executions; on a large live database run it before `migrate` in batches of agendas if the
# write is too long for one transaction (docs/deploy.md, "Upgrading a large live database").
NUMBER_FROM_EXECUTIONS = """
UPDATE agendas_agendaprogress SET last_execution_number = latest.number
FROM (
    SELECT agenda_id, max(number) AS number FROM agendas_execution GROUP BY agenda_id
) AS latest
WHERE agendas_agendaprogress.agenda_id = latest.agenda_id
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0027_pull_request_answered_once"),
    ]

    operations = [
        migrations.AddField(
            model_name="agendaprogress",
            name="last_execution_number",
            field=models.PositiveSmallIntegerField(default=0, db_default=0, editable=False),
        ),
        migrations.RunSQL(NUMBER_FROM_EXECUTIONS, migrations.RunSQL.noop),
    ]
