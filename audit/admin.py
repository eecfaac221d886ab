from django.contrib import admin
from django.http import HttpRequest

from audit.models import AuditEvent
from core.admin import BigTableAdmin, CustomerFilter, exact_filter


@admin.register(AuditEvent)
class AuditEventAdmin(BigTableAdmin):
    """The trail, read-only: nobody adds, changes or deletes an event here.

    A year of it is millions of rows (core.admin.BigTableAdmin): the search matches indexed
    columns exactly (the actor through `user`, whose key is indexed; the `username` snapshot
    and `cid` have no index), the action is typed, not listed.
    """

    list_display = [
        "created_at",
        "username",
        "token_name",
        "action",
        "target_type",
        "target_id",
        "customer",
        "address",
    ]
    list_filter = [
        exact_filter("action", placeholder="e.g. agenda.abort"),
        CustomerFilter,
        "created_at",
    ]
    search_fields = ["target_id", "id", "action", "user__username"]
    search_help_text = "The target's id, the event's id, the action or the username, exactly."
    sortable_by = ["created_at"]
    list_select_related = ["customer"]
    readonly_fields = [field.name for field in AuditEvent._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
