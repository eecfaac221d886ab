"""The indexes of optional keys hold only the rows that have one (docs/decisions.md, "Optional
keys are indexed only where they are set"):

- `agenda_link_id`, `progress_link_id`, `execution_link_id`, `operation_link_id` (link_id)
  WHERE link_id <> '';
- `agenda_external_id` (external_id) WHERE external_id <> '';
- `agenda_template` (template_id, customer_id, created_at DESC) WHERE template_id IS NOT NULL;
- the foreign-key index of the agenda's `schedule` becomes `agenda_schedule` (schedule_id)
  WHERE schedule_id IS NOT NULL.

Most agendas carry no link id, external id, template or schedule, and each full index took an
entry for every one of them (the progress row's at each of its three never-HOT state changes):
12 of an agenda's 83 index entries, all into one growing run of equal keys. Every question
these indexes answer names a value, which implies the condition.

On a large live database (docs/deploy.md, "Upgrading a large live database") build them first,
under a new name, then swap, for each index (here the progress row's link id):
  CREATE INDEX CONCURRENTLY progress_link_id_partial ON agendas_agendaprogress (link_id)
      WHERE link_id <> '';
  DROP INDEX CONCURRENTLY progress_link_id;
  ALTER INDEX progress_link_id_partial RENAME TO progress_link_id;
and for the schedule's, `CREATE INDEX CONCURRENTLY agenda_schedule ON agendas_agenda
(schedule_id) WHERE schedule_id IS NOT NULL` then `DROP INDEX CONCURRENTLY
agendas_agenda_schedule_id_c0e850d6`; then `manage.py migrate agendas 0032 --fake`.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0031_fill_queue_after'),
        ('resourcepools', '0005_fair_share_default'),
        ('scheduling', '0005_schedule_template_version'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='agenda',
            name='agenda_template',
        ),
        migrations.RemoveIndex(
            model_name='agenda',
            name='agenda_link_id',
        ),
        migrations.RemoveIndex(
            model_name='agenda',
            name='agenda_external_id',
        ),
        migrations.RemoveIndex(
            model_name='agendaprogress',
            name='progress_link_id',
        ),
        migrations.RemoveIndex(
            model_name='execution',
            name='execution_link_id',
        ),
        migrations.RemoveIndex(
            model_name='operationprogress',
            name='operation_link_id',
        ),
        migrations.AlterField(
            model_name='agenda',
            name='schedule',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='agendas', to='scheduling.schedule'),
        ),
        migrations.AddIndex(
            model_name='agenda',
            index=models.Index(condition=models.Q(('template__isnull', False)), fields=['template', 'customer', '-created_at'], name='agenda_template'),
        ),
        migrations.AddIndex(
            model_name='agenda',
            index=models.Index(condition=models.Q(('schedule__isnull', False)), fields=['schedule'], name='agenda_schedule'),
        ),
        migrations.AddIndex(
            model_name='agenda',
            index=models.Index(condition=models.Q(('link_id', ''), _negated=True), fields=['link_id'], name='agenda_link_id'),
        ),
        migrations.AddIndex(
            model_name='agenda',
            index=models.Index(condition=models.Q(('external_id', ''), _negated=True), fields=['external_id'], name='agenda_external_id'),
        ),
        migrations.AddIndex(
            model_name='agendaprogress',
            index=models.Index(condition=models.Q(('link_id', ''), _negated=True), fields=['link_id'], name='progress_link_id'),
        ),
        migrations.AddIndex(
            model_name='execution',
            index=models.Index(condition=models.Q(('link_id', ''), _negated=True), fields=['link_id'], name='execution_link_id'),
        ),
        migrations.AddIndex(
            model_name='operationprogress',
            index=models.Index(condition=models.Q(('link_id', ''), _negated=True), fields=['link_id'], name='operation_link_id'),
        ),
    ]
