import copy

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.forms.models import construct_instance
from django.http import HttpRequest

from agendas.models import AgendaProgress
from core.admin import BigTableAdmin, CustomerFilter, InsightFilter, OwnedRowAdmin
from resourcepools.admin import InsightAdmin as BaseInsightAdmin
from resourcepools.models import Insight
from scheduling.fill import insight_fill
from scheduling.models import (
    Alert,
    AlertRule,
    CallbackDelivery,
    CustomerLane,
    InsightScheduleInfo,
    QueuedAgenda,
    ReadyAgenda,
    Schedule,
)
from scheduling.schedule_services import schedule_save_checked, schedule_validate


class ReadOnlyAdmin(admin.ModelAdmin):
    """Queue and outbox rows change through services only."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class BigReadOnlyAdmin(ReadOnlyAdmin, BigTableAdmin):
    """Read-only, over a table that grows with the backlog or the history (core.admin)."""


@admin.register(ReadyAgenda)
class ReadyAgendaAdmin(BigReadOnlyAdmin):
    list_display = ["agenda_id", "insight", "customer", "priority", "added_at"]
    list_filter = [InsightFilter, CustomerFilter]
    search_fields = ["agenda__id"]
    search_help_text = "The agenda's id (or its first 8+ digits), exactly."
    sortable_by = ["agenda_id"]
    list_select_related = ["insight", "customer"]


@admin.register(QueuedAgenda)
class QueuedAgendaAdmin(BigReadOnlyAdmin):
    list_display = ["agenda_id", "insight", "customer", "position", "queued_at"]
    list_filter = [InsightFilter, CustomerFilter]
    search_fields = ["agenda__id"]
    search_help_text = "The agenda's id (or its first 8+ digits), exactly."
    sortable_by = ["agenda_id"]
    list_select_related = ["insight", "customer"]


@admin.register(InsightScheduleInfo)
class InsightScheduleInfoAdmin(ReadOnlyAdmin):
    list_display = ["insight", "virtual_time", "last_fill_at", "last_fill_count"]
    list_select_related = ["insight"]


@admin.register(CustomerLane)
class CustomerLaneAdmin(ReadOnlyAdmin):
    """Each customer's turn-keeping per insight (docs/design.md §6.1), to see who is served."""

    list_display = [
        "customer",
        "insight",
        "active",
        "served",
        "mean_seconds",
        "pending_count",
        "pending_charge",
    ]
    list_filter = ["active", "insight"]
    search_fields = ["customer__slug", "customer__name"]
    list_select_related = ["insight", "customer"]
    ordering = ["insight", "served"]


class ScheduleAdminForm(forms.ModelForm):
    """The checks of the schedule API, as form errors: a bad cron expression or time zone, a
    template not shared with the customer, a pinned template version it lacks, a payload it
    refuses, end before start."""

    class Meta:
        model = Schedule
        # state, next_run_at and last_run_at are read-only here: pause/resume and the cron pass.
        # What the schedule is first; the bookkeeping link_id and cid last (OwnedRowAdmin
        # folds them into a collapsed "Tracking" section).
        fields = [
            "name",
            "customer",
            "template",
            "template_version",
            "payload",
            "cron",
            "timezone",
            "start_at",
            "end_at",
            "catch_up",
            "overlap",
            "link_id",
            "cid",
        ]

    def clean(self) -> dict:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        candidate = construct_instance(self, copy.copy(self.instance))
        try:
            schedule_validate(candidate)
        except ValidationError as error:
            for path, messages in error.message_dict.items():
                field = path.split(".", 1)[0]
                for message in messages:
                    where = f"{path}: " if field != path else ""
                    self.add_error(field if field in self.fields else None, f"{where}{message}")
        return cleaned


@admin.register(Schedule)
class ScheduleAdmin(OwnedRowAdmin):
    form = ScheduleAdminForm
    list_display = [
        "name",
        "customer",
        "template",
        "template_version",
        "cron",
        "timezone",
        "state",
        "next_run_at",
    ]
    list_filter = ["state", CustomerFilter, "catch_up", "overlap"]
    search_fields = ["name", "cron", "link_id"]
    autocomplete_fields = ["customer"]
    readonly_fields = ["next_run_at", "last_run_at", "state"]

    def save_model(self, request, obj: Schedule, form, change: bool) -> None:
        schedule_save_checked(obj)  # replans next_run_at from the (new) cron, zone and start


class EventFilter(admin.SimpleListFilter):
    """The agenda states a callback can announce, as links (no `SELECT DISTINCT event`)."""

    title = "event"
    parameter_name = "event"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return list(AgendaProgress.State.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(event=self.value()) if self.value() else queryset


@admin.register(CallbackDelivery)
class CallbackDeliveryAdmin(BigReadOnlyAdmin):
    list_display = ["id", "agenda_id", "event", "status", "attempts", "last_status_code", "url"]
    list_filter = ["status", EventFilter, CustomerFilter]
    search_fields = ["agenda__id", "id", "link_id"]
    search_help_text = (
        "The agenda's id (or its first 8+ digits), the delivery's number or its link id, exactly."
    )
    sortable_by = ["id", "agenda_id"]


@admin.register(AlertRule)
class AlertRuleAdmin(OwnedRowAdmin):
    list_display = ["name", "kind", "customer", "insight", "threshold", "is_enabled"]
    list_filter = ["kind", "is_enabled", CustomerFilter]
    search_fields = ["name"]
    autocomplete_fields = ["customer"]


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = ["rule", "customer", "state", "value", "opened_at", "resolved_at"]
    list_filter = ["state", CustomerFilter]
    search_fields = ["rule__name", "message"]


@admin.action(description="Fill now: move ready agendas into the queue", permissions=["change"])
def fill_now(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    """Run the fill service (docs/design.md §6.1) for each selected insight, now."""
    moved, busy = 0, []
    for insight in queryset:
        result = insight_fill(insight_id=insight.pk)
        moved += result.moved
        if result.skipped:
            busy.append(insight.name)
    modeladmin.message_user(
        request, f"{moved} agenda(s) queued from {len(queryset)} insight(s).", messages.SUCCESS
    )
    if busy:
        modeladmin.message_user(
            request,
            f"Another fill was running for {', '.join(busy)}; those were skipped.",
            messages.WARNING,
        )


# The insight admin lives with its model in resourcepools; the scheduler adds its action here,
# so resourcepools never imports the scheduler.
admin.site.unregister(Insight)


@admin.register(Insight)
class InsightAdmin(BaseInsightAdmin):
    actions = [fill_now]
