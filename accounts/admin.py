"""API tokens in the admin: add one (its key is shown once), see last use, delete = revoke."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone
from rest_framework.authtoken.models import TokenProxy

from accounts.models import ApiToken
from accounts.services import default_lifetime, token_issue, token_revoke

# Plain-text DRF tokens no longer authenticate (accounts/migrations/0002 moved them here).
if admin.site.is_registered(TokenProxy):
    admin.site.unregister(TokenProxy)


class ApiTokenAddForm(forms.ModelForm):
    expiry = forms.DateTimeField(
        required=False, help_text="Empty: the default lifetime (POP_TOKEN_TTL_DAYS)."
    )
    never_expires = forms.BooleanField(required=False)

    class Meta:
        model = ApiToken
        fields = ["user", "name"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "created", "expiry", "last_used_at"]
    list_filter = ["created", "expiry"]
    search_fields = ["name", "user__username"]
    list_select_related = ["user"]
    readonly_fields = ["user", "name", "created", "expiry", "last_used_at"]
    fields = ["user", "name", "created", "expiry", "last_used_at"]
    autocomplete_fields = ["user"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a token is issued or revoked, never edited

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
            kwargs["fields"] = ["user", "name", "expiry", "never_expires"]
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return ["user", "name", "expiry", "never_expires"]
        return self.fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.readonly_fields if obj is not None else []

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        data = form.cleaned_data
        if data.get("never_expires"):
            lifetime = None
        elif data.get("expiry"):
            lifetime = data["expiry"] - timezone.now()
        else:
            lifetime = default_lifetime()
        issued = token_issue(
            principal=request.user, user=data["user"], name=data["name"], lifetime=lifetime
        )
        obj.pk, obj.digest = issued.token.pk, issued.token.digest
        obj.created, obj.expiry = issued.token.created, issued.token.expiry
        self.message_user(
            request,
            f"Token key (shown once, copy it now): {issued.key}",
            messages.WARNING,
        )

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        token_revoke(principal=request.user, token=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for token in queryset.select_related("user"):
            token_revoke(principal=request.user, token=token)
