"""Admin of triggers (checked like the API's, secret never shown but once on creation) and of
their firings (read-only, a table that grows with history: core.admin.BigTableAdmin)."""

import copy

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.forms.models import construct_instance
from django.template.response import TemplateResponse
from django.urls import reverse

from core.admin import BigTableAdmin, CustomerFilter, OwnedRowAdmin
from triggers.models import Trigger, TriggerFiring
from triggers.services import trigger_save_checked, trigger_validate


class TriggerAdminForm(forms.ModelForm):
    """The checks of the trigger API, as form errors."""

    class Meta:
        model = Trigger
        fields = [
            "name",
            "customer",
            "template",
            "template_version",
            "payload_mapping",
            "filter",
            "labels",
            "event_id_pointer",
            "enabled",
            "link_id",
            "cid",
        ]

    @property
    def template_changed(self) -> bool:
        """A new trigger, or another template or version: only then are they checked again."""
        changed = {"template", "template_version"} & set(self.changed_data)
        return self.instance._state.adding or bool(changed)

    def clean(self) -> dict:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        candidate = construct_instance(self, copy.copy(self.instance))
        try:
            trigger_validate(candidate, template_changed=self.template_changed)
        except ValidationError as error:
            for path, messages_ in error.message_dict.items():
                field = path.split(".", 1)[0]
                for message in messages_:
                    where = f"{path}: " if field != path else ""
                    self.add_error(field if field in self.fields else None, f"{where}{message}")
        return cleaned


@admin.register(Trigger)
class TriggerAdmin(OwnedRowAdmin):
    form = TriggerAdminForm
    list_display = ["name", "customer", "template", "template_version", "enabled", "created_at"]
    list_filter = ["enabled", CustomerFilter]
    search_fields = ["name", "link_id"]
    autocomplete_fields = ["customer"]
    readonly_fields = ["created_by"]

    def save_model(self, request, obj: Trigger, form, change: bool) -> None:
        if not change and request.user.pk:
            obj.created_by = request.user
        trigger_save_checked(obj, template_changed=form.template_changed)

    def response_add(self, request, obj: Trigger, post_url_continue=None):
        """Show the new secret in this answer's page, once: never as a message, which the
        default storage keeps in a signed but readable cookie."""
        return TemplateResponse(
            request,
            "admin/triggers/trigger/secret_shown.html",
            {
                **self.admin_site.each_context(request),
                "title": f"Trigger {obj.name} created",
                "trigger": obj,
                "opts": self.opts,
                "change_url": reverse("admin:triggers_trigger_change", args=[obj.pk]),
                "changelist_url": reverse("admin:triggers_trigger_changelist"),
            },
        )  # the admin's views are never_cache: no copy of the secret is kept on the way


@admin.register(TriggerFiring)
class TriggerFiringAdmin(BigTableAdmin):
    list_display = ["id", "trigger", "customer", "status", "received_at", "agenda_id"]
    list_filter = ["status", CustomerFilter]
    list_select_related = ["trigger", "customer"]
    search_fields = ["trigger__id", "agenda__id", "id"]
    search_help_text = "The trigger's, the agenda's or the firing's id, exactly."
    sortable_by = ["received_at"]
    raw_id_fields = ["trigger", "agenda", "customer"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
