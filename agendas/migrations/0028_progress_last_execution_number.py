"""Agenda progress: `last_execution_number`, so a claim numbers an agenda's next execution
without reading its executions (docs/decisions.md, "The claim reads no execution").

Rows that exist when it runs keep NULL there (the column is added without a default or a
CHECK, which PostgreSQL does without rewriting or scanning the table); the claim numbers such
an agenda from its executions once and sets the column. New rows start at 0. Nothing is
backfilled, so the migration holds the progress table's lock for milliseconds, not for an
UPDATE of every agenda that ever ran (55 s for a million rows on a synthetic copy).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0027_pull_request_answered_once"),
    ]

    operations = [
        migrations.AddField(
            model_name="agendaprogress",
            name="last_execution_number",
            field=models.SmallIntegerField(null=True, editable=False),
        ),
        migrations.AlterField(
            model_name="agendaprogress",
            name="last_execution_number",
            field=models.SmallIntegerField(null=True, default=0, db_default=0, editable=False),
        ),
    ]
