"""Query filters of audit-events/."""

import django_filters

from audit.models import AuditEvent
from core.api import UTCIsoDateTimeFilter, customer_filter


class AuditEventFilter(django_filters.FilterSet):
    customer = customer_filter()
    action = django_filters.CharFilter(help_text='Exact action, e.g. "agenda.abort".')
    user = django_filters.CharFilter(
        field_name="username", help_text='Exact username of the actor ("system" for the system).'
    )
    token_name = django_filters.CharFilter(help_text="Exact name of the API token used.")
    target_type = django_filters.CharFilter(help_text='Exact target model, e.g. "agendas.agenda".')
    target_id = django_filters.CharFilter(help_text="Exact target id.")
    since = UTCIsoDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="At or after (ISO 8601)."
    )
    until = UTCIsoDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="Before (ISO 8601)."
    )

    class Meta:
        model = AuditEvent
        fields = ["customer", "action", "user", "token_name", "target_type", "target_id"]
