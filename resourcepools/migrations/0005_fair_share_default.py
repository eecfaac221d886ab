"""Fair share becomes the default algorithm of new insights (docs/decisions.md); existing
insights keep theirs."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('resourcepools', '0004_fair_share'),
    ]

    operations = [
        migrations.AlterField(
            model_name='insight',
            name='scheduling_algorithm',
            field=models.CharField(choices=[('round_robin', 'round robin'), ('fifo', 'first in, first out'), ('weighted_fair', 'weighted fair'), ('fair_share', 'fair share of execution time')], default='fair_share', help_text='fair_share (default): execution time by weight; round_robin: turns; weighted_fair: turns by weight; fifo: oldest first.', max_length=20),
        ),
    ]
