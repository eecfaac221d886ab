# The given-up callback deliveries, counted by /metrics from a partial index (issue 18): the
# gauge no longer reads every delivered row of the history. Plain CREATE INDEX in the
# migration's transaction: writes to the outbox wait while it scans the table. On a large live
# table, build it beforehand with CREATE INDEX CONCURRENTLY (same name, column and condition),
# then apply this migration with --fake.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0021_progress_has_waiters"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="callbackdelivery",
            index=models.Index(
                condition=models.Q(("status", "failed")), fields=["id"], name="callback_failed"
            ),
        ),
    ]
