"""The ready set, the queues and the callback outbox join the agendas app (state only: their
tables, created by scheduling.0001, keep their names, indexes and rows)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0002_queue_table_autovacuum'),
        ('agendas', '0003_operation_definition'),
        ('resourcepools', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='CallbackDelivery',
                    fields=[
                        ('id', models.BigAutoField(primary_key=True, serialize=False)),
                        ('link_id', models.CharField(blank=True, db_index=True, default='', max_length=255)),
                        ('cid', models.CharField(blank=True, default='', max_length=64)),
                        ('url', models.URLField(max_length=1000)),
                        ('event', models.CharField(max_length=20)),
                        ('body', models.JSONField()),
                        ('attempts', models.PositiveSmallIntegerField(default=0)),
                        ('next_attempt_at', models.DateTimeField()),
                        ('status', models.CharField(choices=[('pending', 'pending'), ('delivered', 'delivered'), ('failed', 'failed')], default='pending', max_length=20)),
                        ('last_status_code', models.PositiveSmallIntegerField(blank=True, null=True)),
                        ('last_error', models.TextField(blank=True, default='')),
                        ('delivered_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('agenda', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='callback_deliveries', to='agendas.agenda')),
                        ('customer', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='callback_deliveries', to='resourcepools.customer')),
                    ],
                    options={
                        'verbose_name_plural': 'callback deliveries',
                        'db_table': 'scheduling_callbackdelivery',
                        'ordering': ['-id'],
                        'indexes': [models.Index(condition=models.Q(('status', 'pending')), fields=['next_attempt_at'], name='callback_due'), models.Index(fields=['agenda', 'id'], name='callback_agenda_order')],
                    },
                ),
                migrations.CreateModel(
                    name='QueuedAgenda',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('position', models.BigIntegerField()),
                        ('queued_at', models.DateTimeField()),
                        ('agenda', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='queue_entry', to='agendas.agenda')),
                        ('customer', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='queued_agendas', to='resourcepools.customer')),
                        ('insight', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='queued_agendas', to='resourcepools.insight')),
                    ],
                    options={
                        'db_table': 'scheduling_queuedagenda',
                        'indexes': [models.Index(fields=['insight', 'position'], name='queue_order')],
                    },
                ),
                migrations.CreateModel(
                    name='ReadyAgenda',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('priority', models.PositiveSmallIntegerField(default=5)),
                        ('added_at', models.DateTimeField()),
                        ('agenda', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='ready_entry', to='agendas.agenda')),
                        ('customer', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='ready_agendas', to='resourcepools.customer')),
                        ('insight', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='ready_agendas', to='resourcepools.insight')),
                    ],
                    options={
                        'db_table': 'scheduling_readyagenda',
                        'indexes': [models.Index(models.F('insight'), models.F('customer'), models.OrderBy(models.F('priority'), descending=True), models.F('added_at'), name='ready_fair_order'), models.Index(fields=['insight', 'added_at'], name='ready_fifo_order')],
                    },
                ),
            ],
        ),
    ]
