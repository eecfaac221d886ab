"""Form fields the pages share for naming a customer."""

import uuid
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from resourcepools.models import Customer

# A filter select lists at most this many customers or templates; past it the field is typed
# (a customer's slug or id, a template's id): a select of every customer of a big farm would
# be drawn and sent on every page view.
CHOICES_SHOWN = 100


class CustomerKeyField(forms.CharField):
    """A customer named by slug or id, resolved among `customers` (the ones the viewer may
    name, scoped by a selector) to its id; an unknown or foreign one is a form error."""

    def __init__(self, *, customers: QuerySet[Customer], **kwargs: Any) -> None:
        self.customers = customers
        kwargs.setdefault("label", "Customer (slug or id)")
        super().__init__(required=False, max_length=255, strip=True, **kwargs)

    def clean(self, value: Any) -> str:
        text = super().clean(value)
        if not text:
            return ""
        try:
            key = Q(pk=uuid.UUID(text))
        except ValueError:
            key = Q(slug=text)
        found = self.customers.filter(key).values_list("pk", flat=True).first()
        if found is None:
            raise ValidationError(f"No customer {text}.")
        return str(found)
