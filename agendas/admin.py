from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from agendas.models import (
    Agenda,
    AgendaProgress,
    AgendaTemplate,
    Execution,
    OperationProgress,
)
from agendas.services import agenda_abort, agenda_pause, agenda_resume
from agendas.states import InvalidTransition
from agendas.template_services import template_version_record
from agendas.template_version_models import VERSIONED_FIELDS
from agendas.template_versions import template_version_list
from core.admin import BigTableAdmin, CustomerFilter, InsightFilter, OwnedRowAdmin, exact_filter
from core.pages import pretty_json as indented_json

TemplateFilter = exact_filter(
    "template", "template__name", "template__id", placeholder="template name or id"
)


ADMIN_VERSIONS_SHOWN = 50


@admin.register(AgendaTemplate)
class AgendaTemplateAdmin(OwnedRowAdmin):
    list_display = ["name", "customer", "is_global", "created_at"]
    list_filter = [CustomerFilter, "is_global"]
    search_fields = ["name", "description", "link_id"]
    autocomplete_fields = ["customer"]
    filter_horizontal = ["allowed_customers"]
    readonly_fields = ["versions"]

    @admin.display(description=f"versions (the newest {ADMIN_VERSIONS_SHOWN})")
    def versions(self, template: AgendaTemplate) -> SafeString:
        """The template's newest versions, read-only: saving the template writes them."""
        if template.pk is None:
            return format_html("{}", "Version 1 is recorded when the template is saved.")
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (version.number, version.created_at, version.author or "—", version.note)
                for version in template_version_list(template=template).defer(
                    "agenda", "static_parameters", "payload_schema"
                )[:ADMIN_VERSIONS_SHOWN]
            ),
        )
        return format_html(
            "<table><thead><tr><th>version</th><th>saved</th><th>by</th><th>note</th></tr>"
            '</thead><tbody>{}</tbody></table><p><a href="{}#versions">Compare versions on '
            "the template page</a></p>",
            rows,
            reverse("pages:template-detail", kwargs={"template_id": template.pk}),
        )

    def save_model(
        self, request: HttpRequest, obj: AgendaTemplate, form: Any, change: bool
    ) -> None:
        previous = None
        if change:
            saved = AgendaTemplate.objects.filter(pk=obj.pk).values(*VERSIONED_FIELDS).first()
            previous = dict(saved) if saved else None
        super().save_model(request, obj, form, change)
        # An edit here is versioned like one through the API (docs/design.md §5.3).
        template_version_record(
            principal=request.user, template=obj, note="saved in the admin", previous=previous
        )


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

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # An agenda leaves by the reap once it ended, or with its customer: a delete here
        # would skip the state machine (an agenda waiting for it would wait forever).
        return False


def pretty_json(value: Any) -> SafeString:
    """A JSON value indented over several lines, escaped, in a <pre>."""
    return format_html("<pre>{}</pre>", indented_json(value))


def dashboard_url(agenda: Agenda) -> str:
    return reverse("pages:agenda-detail", kwargs={"agenda_id": agenda.pk})


@admin.register(Agenda)
class AgendaAdmin(ReadOnlyMixin, BigTableAdmin):
    list_display = [
        "id",
        "customer",
        "insight",
        "state",
        "percent",
        "priority",
        "link_id",
        "created_at",
    ]
    list_filter = ["progress__state", CustomerFilter, InsightFilter, TemplateFilter, "created_at"]
    # Each one indexed, matched whole (core.admin.BigTableAdmin).
    search_fields = ["id", "external_id", "link_id", "cid"]
    search_help_text = (
        "The agenda's id (or its first 8+ digits), external id, link id or cid, exactly."
    )
    sortable_by = ["id", "link_id", "created_at"]
    list_select_related = ["customer", "insight", "progress"]
    actions = [abort_selected, pause_selected, resume_selected]
    # Read-only: every field is shown, the JSON ones indented, with the operations' progress.
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "dashboard_link",
                    "state",
                    "percent",
                    "state_message",
                    "customer",
                    "insight",
                    "template",
                    "template_version",
                    "schedule",
                    "priority",
                    "external_id",
                    "labels_pretty",
                ]
            },
        ),
        ("Operations", {"fields": ["operation_progress", "operations_pretty", "params_pretty"]}),
        (
            "Retries and callback",
            {
                "fields": [
                    "max_attempts",
                    "retry_delay_seconds",
                    "cost",
                    "callback_url",
                    "idempotency_key",
                ]
            },
        ),
        (
            "Tracking",
            {"fields": ["link_id", "cid", "created_at", "updated_at"], "classes": ["collapse"]},
        ),
    ]
    readonly_fields = [
        "dashboard_link",
        "state",
        "percent",
        "state_message",
        "labels_pretty",
        "operation_progress",
        "operations_pretty",
        "params_pretty",
        "created_at",
        "updated_at",
    ]

    def view_on_site(self, agenda: Agenda) -> str:
        return dashboard_url(agenda)

    @admin.display(ordering="progress__state")
    def state(self, agenda: Agenda) -> str:
        return agenda.progress.state

    @admin.display(description="progress", ordering="progress__percent_complete")
    def percent(self, agenda: Agenda) -> str:
        return f"{agenda.progress.percent_complete:.0f}%"

    @admin.display(description="message")
    def state_message(self, agenda: Agenda) -> str:
        return agenda.progress.message

    @admin.display(description="dashboard")
    def dashboard_link(self, agenda: Agenda) -> SafeString:
        return format_html('<a href="{}">Open on the dashboard</a>', dashboard_url(agenda))

    @admin.display(description="labels")
    def labels_pretty(self, agenda: Agenda) -> SafeString:
        return pretty_json(agenda.labels)

    @admin.display(description="operations (as submitted)")
    def operations_pretty(self, agenda: Agenda) -> SafeString:
        return pretty_json(agenda.operations)

    @admin.display(description="params")
    def params_pretty(self, agenda: Agenda) -> SafeString:
        return pretty_json(agenda.params)

    @admin.display(description="operation progress")
    def operation_progress(self, agenda: Agenda) -> SafeString:
        progress = agenda.progress
        meta = AgendaProgress._meta
        operations = progress.operations.order_by("position").values_list(
            "position", "name", "type", "state", "percent_complete", "attempt_count", "message"
        )
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td></tr>",
            (
                (position, name, kind, state, f"{percent:.0f}%", attempts, message)
                for position, name, kind, state, percent, attempts, message in operations
            ),
        )
        return format_html(
            "<table><thead><tr><th>#</th><th>name</th><th>type</th><th>state</th>"
            "<th>progress</th><th>attempts</th><th>message</th></tr></thead>"
            '<tbody>{}</tbody></table><p><a href="{}">Progress details</a></p>',
            rows,
            reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[progress.pk]),
        )


class OperationProgressInline(admin.TabularInline):
    model = OperationProgress
    extra = 0
    can_delete = False
    fields = ["position", "name", "type", "state", "percent_complete", "attempt_count", "message"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(AgendaProgress)
class AgendaProgressAdmin(ReadOnlyMixin, BigTableAdmin):
    list_display = [
        "agenda_id",
        "customer",
        "state",
        "percent_complete",
        "attempts_completed",
        "updated_at",
    ]
    list_filter = ["state", CustomerFilter, "abort_requested", "pause_requested"]
    # Not cid: it is the agenda's, indexed there only (find the agenda by it first).
    search_fields = ["agenda__id", "link_id"]
    search_help_text = "The agenda's id (or its first 8+ digits) or link id, exactly."
    sortable_by = ["agenda_id"]
    list_select_related = ["customer"]
    inlines = [OperationProgressInline]


@admin.register(OperationProgress)
class OperationProgressAdmin(ReadOnlyMixin, BigTableAdmin):
    list_display = ["name", "type", "state", "percent_complete", "attempt_count", "customer"]
    list_filter = ["state", exact_filter("type", placeholder="operation type"), CustomerFilter]
    search_fields = ["agenda_progress__agenda__id", "id", "link_id"]
    search_help_text = (
        "The agenda's id (or its first 8+ digits), the operation's id or its link id, exactly."
    )
    sortable_by: list[str] = []
    list_select_related = ["customer"]


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyMixin, BigTableAdmin):
    list_display = ["agenda_id", "number", "insight", "worker", "outcome", "started_at", "ended_at"]
    list_filter = ["outcome", InsightFilter, CustomerFilter]
    search_fields = ["agenda__id", "id", "link_id"]
    search_help_text = (
        "The agenda's id (or its first 8+ digits), the execution's id or its link id, exactly."
    )
    sortable_by = ["agenda_id"]
    list_select_related = ["insight"]
    exclude = ["lease_token"]
