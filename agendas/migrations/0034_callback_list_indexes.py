"""The callback outbox's list reads by index with every filter (docs/decisions.md, "Every
filter of a big list reads an index"):

- `callback_customer_order` (customer_id, id DESC) replaces the customer's foreign-key index:
  a customer's page, newest first, is a range of it, not a sort of all its deliveries;
- `callback_event_order` (event, customer_id, id DESC): `?event=`, for staff and a customer;
- `callback_link_id` (link_id) WHERE link_id <> '' replaces the link id's index and its
  `varchar_pattern_ops` twin (no LIKE is made on it);
- `?cid=` reads the agenda's `agenda_cid` (a delivery's cid is its agenda's): no index here.

On a large live database (docs/deploy.md, "Upgrading a large live database") build them first:
  CREATE INDEX CONCURRENTLY callback_customer_order ON scheduling_callbackdelivery
      (customer_id, id DESC);
  CREATE INDEX CONCURRENTLY callback_event_order ON scheduling_callbackdelivery
      (event, customer_id, id DESC);
  CREATE INDEX CONCURRENTLY callback_link_id ON scheduling_callbackdelivery (link_id)
      WHERE link_id <> '';
  DROP INDEX CONCURRENTLY scheduling_callbackdelivery_customer_id_abb0a2c9;
  DROP INDEX CONCURRENTLY scheduling_callbackdelivery_link_id_d9665b98;
  DROP INDEX CONCURRENTLY scheduling_callbackdelivery_link_id_d9665b98_like;
then `manage.py migrate agendas 0034 --fake`.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0033_operation_type_index'),
        ('resourcepools', '0005_fair_share_default'),
    ]

    operations = [
        migrations.AlterField(
            model_name='callbackdelivery',
            name='customer',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='callback_deliveries', to='resourcepools.customer'),
        ),
        migrations.AlterField(
            model_name='callbackdelivery',
            name='link_id',
            field=models.CharField(blank=True, default='', max_length=255),
        ),
        migrations.AddIndex(
            model_name='callbackdelivery',
            index=models.Index(fields=['customer', '-id'], name='callback_customer_order'),
        ),
        migrations.AddIndex(
            model_name='callbackdelivery',
            index=models.Index(fields=['event', 'customer', '-id'], name='callback_event_order'),
        ),
        migrations.AddIndex(
            model_name='callbackdelivery',
            index=models.Index(condition=models.Q(('link_id', ''), _negated=True), fields=['link_id'], name='callback_link_id'),
        ),
    ]
