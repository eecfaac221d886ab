from django.contrib import admin
from django.http import HttpRequest

from audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """The trail, read-only: nobody adds, changes or deletes an event here."""

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
    list_filter = ["action", "customer"]
    search_fields = ["username", "token_name", "action", "target_id", "cid"]
    date_hierarchy = "created_at"
    list_select_related = ["customer"]
    readonly_fields = [field.name for field in AuditEvent._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
