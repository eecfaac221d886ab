"""Query filters of the agenda endpoints (docs/design.md §10); every filter documents itself.
The agenda list's own (`AgendaFilter`) live in `agendas.agenda_filters`, shared with actions on
a filter."""

import django_filters

from agendas.agenda_filters import AgendaFilter
from agendas.models import AgendaProgress, AgendaTemplate, OperationProgress
from core.api import OwnedRowFilter, customer_filter, id_prefix_filter

__all__ = [
    "AgendaFilter",
    "AgendaProgressFilter",
    "AgendaTemplateFilter",
    "OperationProgressFilter",
]

AgendaState = AgendaProgress.State
OperationState = OperationProgress.State


class AgendaProgressFilter(OwnedRowFilter):
    customer = customer_filter()
    agenda = django_filters.UUIDFilter(field_name="agenda_id", help_text="Agenda id.")
    state = django_filters.MultipleChoiceFilter(
        choices=AgendaState.choices,
        distinct=False,  # no join to many: DISTINCT would only cost a sort of every row
        help_text="Only progress in these states (repeat the parameter for several).",
    )
    insight = django_filters.UUIDFilter(field_name="agenda__insight_id", help_text="Insight id.")
    template = django_filters.UUIDFilter(field_name="agenda__template_id", help_text="Template id.")
    external_id = django_filters.CharFilter(
        field_name="agenda__external_id", help_text="Exact external id of the agenda."
    )
    # A progress row's cid is its agenda's: the agenda's index holds it, written once, where
    # one on the progress row took an entry at each of its never-HOT state changes.
    cid = django_filters.CharFilter(
        field_name="agenda__cid",
        help_text="Exact correlation id (X-POP-CID of the request that submitted the agenda).",
    )

    class Meta:
        model = AgendaProgress
        fields = ["link_id", "cid", "customer", "agenda", "state"]


class OperationProgressFilter(OwnedRowFilter):
    customer = customer_filter()
    agenda = django_filters.UUIDFilter(
        field_name="agenda_progress__agenda_id", help_text="Agenda id."
    )
    state = django_filters.MultipleChoiceFilter(
        choices=OperationState.choices,
        distinct=False,  # no join to many: DISTINCT would only cost a sort of every row
        help_text="Only operations in these states (repeat the parameter for several).",
    )
    name = django_filters.CharFilter(help_text="Exact operation name.")
    type = django_filters.CharFilter(help_text="Exact operation type.")
    # An operation's cid is its agenda's, which the agenda's index holds.
    cid = django_filters.CharFilter(
        field_name="agenda_progress__agenda__cid",
        help_text="Exact correlation id (X-POP-CID of the request that submitted the agenda).",
    )

    class Meta:
        model = OperationProgress
        fields = ["link_id", "cid", "customer", "agenda", "state", "name", "type"]


class AgendaTemplateFilter(OwnedRowFilter):
    id_prefix = id_prefix_filter()
    customer = customer_filter()
    name = django_filters.CharFilter(help_text="Exact template name.")
    is_global = django_filters.BooleanFilter(help_text="Only global (true) or private (false).")

    class Meta:
        model = AgendaTemplate
        fields = ["link_id", "cid", "customer", "name", "is_global"]
