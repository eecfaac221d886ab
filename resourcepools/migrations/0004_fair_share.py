"""Fair share: the algorithm choice and each insight's usage half-life."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('resourcepools', '0003_hold_customer_pause_insight'),
    ]

    operations = [
        migrations.AddField(
            model_name='insight',
            name='usage_half_life_seconds',
            field=models.PositiveIntegerField(default=3600, help_text='Fair share: execution time used this long ago counts half.', validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AlterField(
            model_name='insight',
            name='scheduling_algorithm',
            field=models.CharField(choices=[('round_robin', 'round robin'), ('fifo', 'first in, first out'), ('weighted_fair', 'weighted fair'), ('fair_share', 'fair share of execution time')], default='round_robin', max_length=20),
        ),
    ]
