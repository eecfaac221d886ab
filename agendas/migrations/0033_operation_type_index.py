"""`operation_type` (type, customer_id, created_at DESC): the operation list's `?type=` for
staff (the leading column) and for a customer (the second), newest first, like
`operation_name`. Without it a type nobody runs was a scan of every operation of the history,
for staff and, through the customer's own index, of every operation the customer ever ran
(docs/decisions.md, "Every filter of a big list reads an index").

On a large live database (docs/deploy.md, "Upgrading a large live database") build it first:
  CREATE INDEX CONCURRENTLY operation_type ON agendas_operationprogress
      (type, customer_id, created_at DESC);
then `manage.py migrate agendas 0033 --fake`.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0032_partial_key_indexes'),
        ('resourcepools', '0005_fair_share_default'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='operationprogress',
            index=models.Index(fields=['type', 'customer', '-created_at'], name='operation_type'),
        ),
    ]
