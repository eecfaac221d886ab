"""Forms of the agenda, template and progress pages."""

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from agendas.labels import label_filter_parsed
from agendas.models import AgendaProgress
from agendas.selectors import (
    agenda_template_list,
)
from core.api import unstorable_text_problem
from core.parsers import json_loads_limited
from resourcepools.forms import CHOICES_SHOWN, CustomerKeyField
from resourcepools.models import Customer, Membership
from resourcepools.selectors import (
    customer_list,
    has_role,
    insight_list,
)

Role = Membership.Role
State = AgendaProgress.State


class AgendaFilterForm(forms.Form):
    text = forms.CharField(
        required=False,
        label="Id or external id",
        max_length=255,
        strip=True,
        help_text="Exact: an id or its first 8+ characters, an external id, or a link id.",
    )
    state = forms.ChoiceField(required=False, label="State")
    customer = forms.ChoiceField(required=False, label="Customer")
    template = forms.ChoiceField(required=False, label="Template")
    insight = forms.ChoiceField(required=False, label="Insight")
    link_id = forms.CharField(required=False, label="Link id", max_length=255, strip=True)
    label = forms.CharField(
        required=False,
        label="Label (key:value)",
        max_length=400,
        strip=True,
        help_text="Repeat ?label= in the address to match several.",
    )

    def clean_label(self) -> list[tuple[str, str]]:
        """Every `label` parameter of the address (ANDed), each `key:value`."""
        given = self.data.getlist("label") if hasattr(self.data, "getlist") else []
        try:
            return [label_filter_parsed(text.strip()) for text in given if text.strip()]
        except ValueError as error:
            raise forms.ValidationError(str(error)) from error

    def __init__(self, *args: Any, principal: Any, with_choices: bool = True, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["state"].choices = [("", "any state"), *State.choices]
        if not with_choices:
            # The 5-second table refresh re-applies the filters without building the selects.
            self.fields["customer"] = CustomerKeyField(customers=customer_list(principal=principal))
            for name in ("template", "insight"):
                self.fields[name] = forms.UUIDField(required=False)
            return
        customers = list(
            customer_list(principal=principal)
            .order_by()
            .values_list("pk", "name")[: CHOICES_SHOWN + 1]
        )
        if len(customers) > CHOICES_SHOWN:
            self.fields["customer"] = CustomerKeyField(customers=customer_list(principal=principal))
        else:
            self.fields["customer"].choices = [("", "any customer")] + [
                (str(pk), name) for pk, name in sorted(customers, key=lambda row: row[1])
            ]
        templates = list(
            agenda_template_list(principal=principal)
            .order_by()
            .values_list("pk", "name")[: CHOICES_SHOWN + 1]
        )
        if len(templates) > CHOICES_SHOWN:
            self.fields["template"] = forms.UUIDField(required=False, label="Template id")
        else:
            self.fields["template"].choices = [("", "any template")] + [
                (str(pk), name) for pk, name in sorted(templates, key=lambda row: row[1])
            ]
        self.fields["insight"].choices = [("", "any insight")] + [
            (str(pk), f"{pool} / {name}")
            for pk, name, pool in insight_list(principal=principal).values_list(
                "pk", "name", "resource_pool__name"
            )
        ]


class TemplateRunForm(forms.Form):
    payload = forms.CharField(
        required=False,
        label="Payload (JSON)",
        initial="{}",
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false", "class": "mono"}),
        help_text="Becomes @<pop.payload> in the template.",
    )
    customer = forms.ModelChoiceField(
        queryset=Customer.objects.none(),
        required=False,
        label="Run for customer",
        empty_label="— choose a customer —",
    )
    link_id = forms.CharField(required=False, max_length=255, label="Link id")
    external_id = forms.CharField(required=False, max_length=255, label="External id")
    priority = forms.IntegerField(required=False, min_value=0, max_value=9, label="Priority (0–9)")
    version = forms.IntegerField(
        required=False,
        min_value=1,
        label="Template version",
        help_text="Empty: the latest version.",
    )

    def __init__(self, *args: Any, customers: QuerySet[Customer], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["customer"].queryset = customers

    def clean_payload(self) -> Any:
        text = self.cleaned_data.get("payload", "").strip() or "{}"
        try:
            payload = json_loads_limited(text)
        except json.JSONDecodeError as error:
            raise forms.ValidationError(
                f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})."
            ) from error
        except ValueError as error:  # nested too deep, NaN or Infinity
            raise forms.ValidationError(f"Not usable JSON: {error}") from error
        problem = unstorable_text_problem(payload)
        if problem:
            raise forms.ValidationError(problem)
        return payload

    def add_service_errors(self, error: ValidationError) -> None:
        """Put the service's `{field.path: [messages]}` next to the matching form field."""
        found = error.message_dict if hasattr(error, "error_dict") else {"": error.messages}
        for key, texts in found.items():
            field = key.split(".", 1)[0]
            for text in texts:
                if field in self.fields:
                    rest = key[len(field) + 1 :]
                    self.add_error(field, f"{rest}: {text}" if rest else text)
                elif key in ("", "__all__", "non_field_errors"):
                    self.add_error(None, text)
                else:
                    self.add_error(None, f"{key}: {text}")


def submit_customers(principal: Any) -> QuerySet[Customer]:
    customers = customer_list(principal=principal).order_by("name")
    allowed = [
        pk
        for pk in customers.values_list("pk", flat=True)
        if has_role(principal, pk, Role.SUBMITTER)
    ]
    return customers.filter(pk__in=allowed)


class ProgressForm(forms.Form):
    link_id = forms.CharField(label="Link id", max_length=255, strip=True)
