# Windowed counts over executions per insight and per customer (alert rules, issue 18), by
# outcome so that they are index-only scans; the insight one replaces (insight, ended_at).
# Plain CREATE INDEX in the migration's transaction: writes to agendas_execution wait while
# they build. On a large live table, build them beforehand with CREATE INDEX CONCURRENTLY
# (same names and columns), then apply this migration with --fake.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0013_attempts_started_and_pause_now'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='execution',
            name='execution_insight_ended',
        ),
        migrations.AddIndex(
            model_name='execution',
            index=models.Index(fields=['insight', 'ended_at', 'outcome'], name='execution_insight_window'),
        ),
        migrations.AddIndex(
            model_name='execution',
            index=models.Index(fields=['customer', 'ended_at', 'outcome'], name='execution_customer_window'),
        ),
    ]
