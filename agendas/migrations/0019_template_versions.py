"""Template versions: every template gets its version 1, copied from its current body, static
parameters and payload schema (docs/design.md §5.3)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def first_versions(apps, schema_editor):
    AgendaTemplate = apps.get_model('agendas', 'AgendaTemplate')
    AgendaTemplateVersion = apps.get_model('agendas', 'AgendaTemplateVersion')
    templates = (
        AgendaTemplate.objects.order_by('pk')
        .values_list('pk', 'agenda', 'static_parameters', 'payload_schema')
        .iterator(chunk_size=1000)
    )
    batch = []
    for pk, agenda, static_parameters, payload_schema in templates:
        batch.append(AgendaTemplateVersion(
            template_id=pk, number=1, agenda=agenda, static_parameters=static_parameters or {},
            payload_schema=payload_schema, note='as it was when versions began',
        ))
        if len(batch) == 1000:
            AgendaTemplateVersion.objects.bulk_create(batch)
            batch = []
    AgendaTemplateVersion.objects.bulk_create(batch)
    # Dated when the template last changed (created_at is set on insert), in one statement.
    AgendaTemplateVersion.objects.update(
        created_at=Subquery(
            AgendaTemplate.objects.filter(pk=OuterRef('template_id')).values('updated_at')[:1]
        )
    )


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0018_agenda_waits'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='agenda',
            name='template_version',
            field=models.PositiveIntegerField(blank=True, help_text='The number of the template version it was expanded from.', null=True),
        ),
        migrations.CreateModel(
            name='AgendaTemplateVersion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField(help_text='1, 2, … per template; never reused.')),
                ('agenda', models.JSONField(help_text='Agenda body with @<…> references (docs/design.md §5.3).')),
                ('static_parameters', models.JSONField(blank=True, default=dict)),
                ('payload_schema', models.JSONField(blank=True, null=True)),
                ('note', models.CharField(blank=True, default='', max_length=500)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('author', models.ForeignKey(blank=True, help_text='Who saved it; empty for the scheduler, a migration or a deleted user.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('template', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='versions', to='agendas.agendatemplate')),
            ],
            options={
                'ordering': ['template', '-number'],
                'constraints': [models.UniqueConstraint(fields=('template', 'number'), name='template_version_number'), models.CheckConstraint(condition=models.Q(('number__gte', 1)), name='template_version_number_from_1')],
            },
        ),
        migrations.RunPython(first_versions, migrations.RunPython.noop),
    ]
