"""The agenda list's filters, shared by the API list (`?state=failed&label=batch:42`) and
actions on a filter (`agendas.bulk_actions`), which re-apply them batch by batch; every filter
documents itself (docs/design.md §10.4)."""

import django_filters
from django import forms

from agendas.labels import MAX_LABELS, label_filter_parsed, labels_matching
from agendas.models import Agenda, AgendaProgress
from agendas.selectors import agendas_in_states
from core.api import OwnedRowFilter, customer_filter, id_prefix_filter

AgendaState = AgendaProgress.State


class RepeatedParameterWidget(forms.TextInput):
    """Every value of a repeated query parameter (`?label=a:1&label=b:2`), commas kept; drawn
    as a text input (the browsable API renders the filter form)."""

    def value_from_datadict(self, data, files, name):
        return data.getlist(name) if hasattr(data, "getlist") else data.get(name)

    def format_value(self, value):
        if isinstance(value, list | tuple):
            return ", ".join(str(item) for item in value) or None
        return super().format_value(value)


class LabelPairsField(forms.Field):
    widget = RepeatedParameterWidget

    def to_python(self, value):
        values = [value] if isinstance(value, str) else list(value or [])
        if len(values) > MAX_LABELS:  # an agenda holds no more: more can only match nothing
            raise forms.ValidationError(f"At most {MAX_LABELS} label filters.")
        try:
            return [label_filter_parsed(text) for text in values if text]
        except ValueError as error:
            raise forms.ValidationError(str(error)) from error


class LabelFilter(django_filters.Filter):
    """`?label=key:value`, repeatable and ANDed (agendas/labels.py)."""

    field_class = LabelPairsField

    def filter(self, queryset, value):
        return labels_matching(queryset, value, field=self.field_name) if value else queryset


class AgendaFilter(OwnedRowFilter):
    id_prefix = id_prefix_filter()
    label = LabelFilter(
        field_name="labels",
        help_text="Only agendas with this label, written key:value (repeat for several: all "
        "must match).",
    )
    customer = customer_filter()
    state = django_filters.MultipleChoiceFilter(
        field_name="progress__state",
        choices=AgendaState.choices,
        distinct=False,  # one progress row per agenda: DISTINCT would only cost a sort
        method="filter_states",
        help_text="Only agendas in these states (repeat the parameter for several).",
    )
    insight = django_filters.UUIDFilter(field_name="insight_id", help_text="Insight id.")
    template = django_filters.UUIDFilter(field_name="template_id", help_text="Template id.")
    schedule = django_filters.UUIDFilter(field_name="schedule_id", help_text="Schedule id.")
    external_id = django_filters.CharFilter(help_text="Exact external id.")

    class Meta:
        model = Agenda
        fields = ["link_id", "cid", "customer", "state", "insight", "template", "external_id"]

    def filter_states(self, queryset, name, value):
        if not value:
            return queryset
        # Actions on a set re-apply the filters without a request, on a queryset already scoped.
        principal = getattr(self.request, "user", None)
        if principal is None:
            return queryset.filter(progress__state__in=value)
        return agendas_in_states(queryset, value, principal=principal)
