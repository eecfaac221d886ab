"""The dashboard's Audit page: the trail of the customers the user administers (staff: all)."""

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from audit.selectors import audit_event_list, audit_reader
from resourcepools.forms import CHOICES_SHOWN, CustomerKeyField
from resourcepools.models import Customer, Membership
from resourcepools.selectors import customer_ids_with_role, customer_list, principal_is_staff

EVENTS_PER_PAGE = 50
Role = Membership.Role


class AuditFilterForm(forms.Form):
    customer = forms.ChoiceField(required=False, label="Customer")
    action = forms.CharField(required=False, label="Action", max_length=64, strip=True)
    user = forms.CharField(required=False, label="User", max_length=150, strip=True)
    since = forms.DateTimeField(required=False, label="Since (UTC)")
    until = forms.DateTimeField(required=False, label="Until (UTC)")

    def __init__(self, *args: Any, customers: QuerySet[Customer], **kwargs: Any) -> None:
        """`customers`: the ones whose events the viewer reads; a select of them up to
        CHOICES_SHOWN, else typed (slug or id)."""
        super().__init__(*args, **kwargs)
        shown = list(customers.order_by().values_list("pk", "name")[: CHOICES_SHOWN + 1])
        if len(shown) > CHOICES_SHOWN:
            self.fields["customer"] = CustomerKeyField(customers=customers)
            return
        self.fields["customer"].choices = [("", "any customer")] + [
            (str(pk), name) for pk, name in sorted(shown, key=lambda row: row[1])
        ]


@login_required
def event_list(request: HttpRequest) -> HttpResponse:
    if not audit_reader(request.user):
        raise PermissionDenied("Reading the audit trail needs the admin role for a customer.")
    events = audit_event_list(principal=request.user)
    # The customers whose trail the viewer reads (not "those with events": that would read the
    # whole trail to draw the form).
    customers = customer_list(principal=request.user)
    if not principal_is_staff(request.user):
        customers = customers.filter(pk__in=customer_ids_with_role(request.user, Role.ADMIN))
    form = AuditFilterForm(request.GET or None, customers=customers)
    filters = form.cleaned_data if form.is_valid() else {}
    if filters.get("customer"):
        events = events.filter(customer_id=filters["customer"])
    if filters.get("action"):
        events = events.filter(action=filters["action"])
    if filters.get("user"):
        events = events.filter(username=filters["user"])
    if filters.get("since"):
        events = events.filter(created_at__gte=filters["since"])
    if filters.get("until"):
        events = events.filter(created_at__lt=filters["until"])
    page = Paginator(events, EVENTS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "nav": "audit",
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "filtered": any(filters.values()) if filters else False,
    }
    return render(request, "audit/event_list.html", context)
