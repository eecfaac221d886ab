"""The ready set, the queues and the callback outbox moved to the agendas app (state only: the
tables stay; agendas.0004 takes them over)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0004_queue_and_outbox_models'),
        ('scheduling', '0002_queue_table_autovacuum'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='queuedagenda',
                    name='agenda',
                ),
                migrations.RemoveField(
                    model_name='queuedagenda',
                    name='customer',
                ),
                migrations.RemoveField(
                    model_name='queuedagenda',
                    name='insight',
                ),
                migrations.RemoveField(
                    model_name='readyagenda',
                    name='agenda',
                ),
                migrations.RemoveField(
                    model_name='readyagenda',
                    name='customer',
                ),
                migrations.RemoveField(
                    model_name='readyagenda',
                    name='insight',
                ),
                migrations.DeleteModel(
                    name='CallbackDelivery',
                ),
                migrations.DeleteModel(
                    name='QueuedAgenda',
                ),
                migrations.DeleteModel(
                    name='ReadyAgenda',
                ),
            ],
        ),
    ]
