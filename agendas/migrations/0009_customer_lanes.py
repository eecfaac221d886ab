"""Per-(insight, customer) lanes replace the fill's JSON cursor and credits.

The insight's schedule info joins the agendas app (state only: the table keeps its name and
rows), loses the round-robin cursor and the weighted-fair credits and gains the virtual time;
every (insight, customer) pair with ready agendas gets an active lane at the virtual time 0,
so the first fill after the upgrade serves them all, as the emptied cursor did.
"""

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models


def lanes_for_ready_agendas(apps, schema_editor):
    ReadyAgenda = apps.get_model('agendas', 'ReadyAgenda')
    CustomerLane = apps.get_model('agendas', 'CustomerLane')
    pairs = ReadyAgenda.objects.values_list('insight_id', 'customer_id').distinct().order_by()
    CustomerLane.objects.bulk_create(
        (CustomerLane(insight_id=insight_id, customer_id=customer_id, active=True, served=0.0)
         for insight_id, customer_id in pairs),
        batch_size=1000,
    )


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0008_unanswered_outcome'),
        ('resourcepools', '0004_fair_share'),
        ('scheduling', '0003_queue_and_outbox_models_moved'),
    ]

    operations = [
        migrations.AddField(
            model_name='agenda',
            name='cost',
            field=models.FloatField(blank=True, help_text="Expected execution seconds, charged to the customer's fair share when the agenda is queued and corrected when it ends; empty = the customer's running mean.", null=True, validators=[django.core.validators.MinValueValidator(0.001), django.core.validators.MaxValueValidator(604800)]),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='InsightScheduleInfo',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('pending_customer_ids', models.JSONField(blank=True, default=list)),
                        ('deficits', models.JSONField(blank=True, default=dict)),
                        ('next_position', models.BigIntegerField(default=1)),
                        ('last_fill_at', models.DateTimeField(blank=True, null=True)),
                        ('last_fill_count', models.PositiveIntegerField(default=0)),
                        ('insight', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='schedule_info', to='resourcepools.insight')),
                    ],
                    options={
                        'verbose_name_plural': 'insight schedule info',
                        'db_table': 'scheduling_insightscheduleinfo',
                    },
                ),
            ],
        ),
        migrations.RemoveField(model_name='insightscheduleinfo', name='pending_customer_ids'),
        migrations.RemoveField(model_name='insightscheduleinfo', name='deficits'),
        migrations.AddField(
            model_name='insightscheduleinfo',
            name='virtual_time',
            field=models.FloatField(default=0.0, help_text='Service level of the last turn given: a lane that gets work again starts here.'),
        ),
        migrations.AddField(
            model_name='insightscheduleinfo',
            name='usage_epoch',
            field=models.DateTimeField(blank=True, help_text='Fair share: when charges were last rebased (decay).', null=True),
        ),
        migrations.CreateModel(
            name='CustomerLane',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('active', models.BooleanField(default=True)),
                ('served', models.FloatField(default=0.0)),
                ('mean_seconds', models.FloatField(blank=True, help_text="Running mean of this customer's execution time here.", null=True)),
                ('pending_count', models.PositiveIntegerField(db_default=0, default=0, help_text='Fair share: agendas charged when queued whose execution has not ended.')),
                ('pending_charge', models.FloatField(db_default=0.0, default=0.0, help_text='Fair share: the seconds they were charged, to correct at their end.')),
                ('customer', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='customer_lanes', to='resourcepools.customer')),
                ('insight', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='customer_lanes', to='resourcepools.insight')),
            ],
            options={
                'db_table': 'scheduling_customerlane',
                'indexes': [models.Index(condition=models.Q(('active', True)), fields=['insight', 'served', 'customer'], name='lane_turn_order')],
                'constraints': [models.UniqueConstraint(fields=('insight', 'customer'), name='lane_of_customer')],
            },
        ),
        migrations.RunPython(lanes_for_ready_agendas, migrations.RunPython.noop),
    ]
