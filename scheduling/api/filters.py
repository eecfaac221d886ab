"""Query filters of the schedule, callback, queue and alert endpoints (docs/design.md §10)."""

import django_filters

from core.api import OwnedRowFilter, UTCIsoDateTimeFilter, customer_filter
from resourcepools.models import Insight
from scheduling.models import Alert, CallbackDelivery, Schedule


class ScheduleFilter(OwnedRowFilter):
    customer = customer_filter()
    template = django_filters.UUIDFilter(field_name="template_id", help_text="Template id.")
    state = django_filters.ChoiceFilter(
        choices=Schedule.State.choices, help_text="Only schedules in this state."
    )
    name = django_filters.CharFilter(help_text="Exact schedule name.")

    class Meta:
        model = Schedule
        fields = ["link_id", "cid", "customer", "template", "state", "name"]


class CallbackDeliveryFilter(django_filters.FilterSet):
    link_id = django_filters.CharFilter(help_text="Exact grouping key of the agenda.")
    # A delivery's cid is its agenda's, which the agenda's index holds.
    cid = django_filters.CharFilter(
        field_name="agenda__cid",
        help_text="Exact correlation id (X-POP-CID of the request that submitted the agenda).",
    )
    customer = customer_filter()
    agenda = django_filters.UUIDFilter(field_name="agenda_id", help_text="Agenda id.")
    status = django_filters.ChoiceFilter(
        choices=CallbackDelivery.Status.choices, help_text="Only deliveries in this status."
    )
    event = django_filters.CharFilter(help_text="Exact event (the agenda state it announces).")
    created_after = UTCIsoDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="Created at or after (ISO 8601)."
    )
    created_before = UTCIsoDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="Created before (ISO 8601)."
    )

    class Meta:
        model = CallbackDelivery
        fields = ["link_id", "cid", "customer", "agenda", "status", "event"]


class QueueFilter(django_filters.FilterSet):
    resource_pool = django_filters.UUIDFilter(
        field_name="resource_pool_id", help_text="Only insights of this pool."
    )
    name = django_filters.CharFilter(help_text="Exact insight name.")

    class Meta:
        model = Insight
        fields = ["resource_pool", "name"]


class AlertFilter(django_filters.FilterSet):
    customer = customer_filter()
    state = django_filters.ChoiceFilter(choices=Alert.State.choices, help_text="open or resolved.")
    rule = django_filters.UUIDFilter(field_name="rule_id", help_text="Alert rule id.")
    insight = django_filters.UUIDFilter(field_name="rule__insight_id", help_text="Insight id.")
    opened_after = UTCIsoDateTimeFilter(
        field_name="opened_at", lookup_expr="gte", help_text="Opened at or after (ISO 8601)."
    )

    class Meta:
        model = Alert
        fields = ["customer", "state", "rule", "insight"]
