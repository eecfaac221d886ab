"""The audit trail's list reads by index with every filter (docs/decisions.md, "Every filter
of a big list reads an index"): `audit_user_time`, `audit_token_time` and
`audit_target_type_time` ((username | token_name | target_type), customer_id, created_at DESC);
`audit_target_id` (target_id) replaces the target id's index and its `varchar_pattern_ops`
twin; the customer's foreign-key index goes (`audit_customer_time` leads with it).

On a large live database (docs/deploy.md, "Upgrading a large live database") build them first:
  CREATE INDEX CONCURRENTLY audit_user_time ON audit_auditevent
      (username, customer_id, created_at DESC);
  CREATE INDEX CONCURRENTLY audit_token_time ON audit_auditevent
      (token_name, customer_id, created_at DESC);
  CREATE INDEX CONCURRENTLY audit_target_type_time ON audit_auditevent
      (target_type, customer_id, created_at DESC);
  CREATE INDEX CONCURRENTLY audit_target_id ON audit_auditevent (target_id);
  DROP INDEX CONCURRENTLY audit_auditevent_target_id_cde481b0;
  DROP INDEX CONCURRENTLY audit_auditevent_target_id_cde481b0_like;
  DROP INDEX CONCURRENTLY audit_auditevent_customer_id_5339a91e;
then `manage.py migrate audit 0002 --fake`.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0001_initial'),
        ('resourcepools', '0005_fair_share_default'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='auditevent',
            name='customer',
            field=models.ForeignKey(blank=True, db_index=False, help_text='The customer the action was for; empty for actions of no one customer.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='audit_events', to='resourcepools.customer'),
        ),
        migrations.AlterField(
            model_name='auditevent',
            name='target_id',
            field=models.CharField(blank=True, default='', help_text='Id of the target.', max_length=64),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['username', 'customer', '-created_at'], name='audit_user_time'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['token_name', 'customer', '-created_at'], name='audit_token_time'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['target_type', 'customer', '-created_at'], name='audit_target_type_time'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['target_id'], name='audit_target_id'),
        ),
    ]
