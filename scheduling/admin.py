from django.contrib import admin

from scheduling.models import (
    Alert,
    AlertRule,
    CallbackDelivery,
    InsightScheduleInfo,
    QueuedAgenda,
    ReadyAgenda,
    Schedule,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Queue and outbox rows change through services only."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ReadyAgenda)
class ReadyAgendaAdmin(ReadOnlyAdmin):
    list_display = ["agenda_id", "insight", "customer", "priority", "added_at"]
    list_filter = ["insight", "customer"]
    search_fields = ["=agenda__id"]
    list_select_related = ["insight", "customer"]


@admin.register(QueuedAgenda)
class QueuedAgendaAdmin(ReadOnlyAdmin):
    list_display = ["agenda_id", "insight", "customer", "position", "queued_at"]
    list_filter = ["insight", "customer"]
    search_fields = ["=agenda__id"]
    list_select_related = ["insight", "customer"]


@admin.register(InsightScheduleInfo)
class InsightScheduleInfoAdmin(ReadOnlyAdmin):
    list_display = ["insight", "last_fill_at", "last_fill_count"]
    list_select_related = ["insight"]


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    list_display = ["name", "customer", "template", "cron", "timezone", "state", "next_run_at"]
    list_filter = ["state", "customer", "catch_up", "overlap"]
    search_fields = ["name", "cron", "link_id"]
    readonly_fields = ["next_run_at", "last_run_at", "state"]


@admin.register(CallbackDelivery)
class CallbackDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["id", "agenda_id", "event", "status", "attempts", "last_status_code", "url"]
    list_filter = ["status", "event", "customer"]
    search_fields = ["=agenda__id", "url", "link_id"]


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "customer", "insight", "threshold", "is_enabled"]
    list_filter = ["kind", "is_enabled", "customer"]
    search_fields = ["name"]


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = ["rule", "customer", "state", "value", "opened_at", "resolved_at"]
    list_filter = ["state", "customer"]
    search_fields = ["rule__name", "message"]
