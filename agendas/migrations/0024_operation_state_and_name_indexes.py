# The operation list's `state` and `name` filters by index (issue 18), for staff and for a
# customer: their pages and capped counts no longer scan the operations of the whole history.
# Plain CREATE INDEX in the migration's transaction: writes to operations wait while it builds.
# On a large live table, build both beforehand with CREATE INDEX CONCURRENTLY (same names and
# columns), then apply this migration with --fake.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0023_history_links_without_constraints'),
        ('resourcepools', '0005_fair_share_default'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='operationprogress',
            index=models.Index(fields=['state', 'customer', '-created_at'], name='operation_state'),
        ),
        migrations.AddIndex(
            model_name='operationprogress',
            index=models.Index(fields=['name', 'customer', '-created_at'], name='operation_name'),
        ),
    ]
