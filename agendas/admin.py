from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest

from agendas.models import Agenda, AgendaProgress, AgendaTemplate, Execution, OperationProgress
from agendas.services import agenda_abort, agenda_pause, agenda_resume
from agendas.states import InvalidTransition
from core.admin import OwnedRowAdmin


@admin.register(AgendaTemplate)
class AgendaTemplateAdmin(OwnedRowAdmin):
    list_display = ["name", "customer", "is_global", "created_at"]
    list_filter = ["customer", "is_global"]
    search_fields = ["name", "description", "link_id"]
    filter_horizontal = ["allowed_customers"]


def _apply(modeladmin: admin.ModelAdmin, request: HttpRequest, agendas: QuerySet, service) -> None:
    done, refused = 0, []
    for agenda in agendas:
        try:
            service(principal=request.user, agenda=agenda)
            done += 1
        except (InvalidTransition, PermissionDenied, ValidationError) as error:
            refused.append(str(error))
    if done:
        modeladmin.message_user(request, f"{done} agenda(s) updated.", messages.SUCCESS)
    for reason in refused[:10]:
        modeladmin.message_user(request, reason, messages.WARNING)


@admin.action(description="Abort selected agendas")
def abort_selected(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    _apply(modeladmin, request, queryset, agenda_abort)


@admin.action(description="Pause selected agendas")
def pause_selected(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    _apply(modeladmin, request, queryset, agenda_pause)


@admin.action(description="Resume selected agendas")
def resume_selected(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    _apply(modeladmin, request, queryset, agenda_resume)


class ReadOnlyMixin:
    """Domain rows change through services only; the admin shows them."""

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Agenda)
class AgendaAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["id", "customer", "insight", "state", "priority", "link_id", "created_at"]
    list_filter = ["progress__state", "customer", "insight", "template"]
    search_fields = ["=id", "external_id", "link_id", "cid"]
    list_select_related = ["customer", "insight", "progress"]
    actions = [abort_selected, pause_selected, resume_selected]
    date_hierarchy = "created_at"

    @admin.display(ordering="progress__state")
    def state(self, agenda: Agenda) -> str:
        return agenda.progress.state


class OperationProgressInline(admin.TabularInline):
    model = OperationProgress
    extra = 0
    can_delete = False
    fields = ["position", "name", "type", "state", "percent_complete", "attempt_count", "message"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(AgendaProgress)
class AgendaProgressAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "agenda_id",
        "customer",
        "state",
        "percent_complete",
        "attempts_completed",
        "updated_at",
    ]
    list_filter = ["state", "customer", "abort_requested", "pause_requested"]
    search_fields = ["=agenda__id", "link_id", "message"]
    list_select_related = ["customer"]
    inlines = [OperationProgressInline]


@admin.register(OperationProgress)
class OperationProgressAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["name", "type", "state", "percent_complete", "attempt_count", "customer"]
    list_filter = ["state", "type", "customer"]
    search_fields = ["name", "link_id", "=agenda_progress__agenda__id"]
    list_select_related = ["customer"]


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["agenda_id", "number", "insight", "worker", "outcome", "started_at", "ended_at"]
    list_filter = ["outcome", "insight", "customer"]
    search_fields = ["=agenda__id", "worker", "link_id"]
    list_select_related = ["insight"]
    exclude = ["lease_token"]
