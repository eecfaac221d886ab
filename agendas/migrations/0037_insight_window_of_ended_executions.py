"""The insight's window of executions holds the ended ones only (docs/decisions.md, "A progress
row's cid is read on its agenda", last paragraph): its questions (an alert rule's window) all
bound `ended_at`, and an open execution has none, so its insert wrote an entry nothing reads.
The insight's own equality (the PROTECT check of a deleted insight) reads
`execution_insight_started` (insight_id, started_at), which is whole.

On a large live database (docs/deploy.md, "Upgrading a large live database") build it first:
  CREATE INDEX CONCURRENTLY execution_insight_window_ended ON agendas_execution
      (insight_id, ended_at, outcome) WHERE ended_at IS NOT NULL;
  DROP INDEX CONCURRENTLY execution_insight_window;
  ALTER INDEX execution_insight_window_ended RENAME TO execution_insight_window;
then `manage.py migrate agendas 0037 --fake`.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0036_progress_cid_on_the_agenda'),
        ('resourcepools', '0005_fair_share_default'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='execution',
            name='execution_insight_window',
        ),
        migrations.AddIndex(
            model_name='execution',
            index=models.Index(condition=models.Q(('ended_at__isnull', False)), fields=['insight', 'ended_at', 'outcome'], name='execution_insight_window'),
        ),
    ]
