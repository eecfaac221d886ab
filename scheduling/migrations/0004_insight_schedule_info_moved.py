"""The insight's schedule info moved to the agendas app (state only: agendas.0009 takes the
table over)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0009_customer_lanes'),
        ('scheduling', '0003_queue_and_outbox_models_moved'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='InsightScheduleInfo')],
        ),
    ]
