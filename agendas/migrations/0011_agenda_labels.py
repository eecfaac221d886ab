"""Agenda labels (agendas.labels), and on PostgreSQL the GIN index that serves `labels @> …`.

The index is jsonb_path_ops: it answers containment only, which is the one way labels are
queried, and is a third the size of the default operator class. Existing agendas get `{}`.
"""

from django.db import migrations, models


def labels_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE INDEX IF NOT EXISTS agenda_labels ON agendas_agenda "
            "USING gin (labels jsonb_path_ops)"
        )


def labels_index_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS agenda_labels")


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0010_lane_table_autovacuum'),
    ]

    operations = [
        migrations.AddField(
            model_name='agenda',
            name='labels',
            field=models.JSONField(blank=True, default=dict, help_text='Flat key → text map for finding and acting on sets of agendas (agendas.labels; on PostgreSQL the GIN index agenda_labels serves `labels @> …`).'),
        ),
        migrations.RunPython(labels_index, labels_index_drop),
    ]
