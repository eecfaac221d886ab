"""Query filters of the facility endpoints; every filter documents itself (help_text)."""

import django_filters

from core.api import OwnedRowFilter
from resourcepools.models import Customer, Insight, Membership, ResourcePool


class CustomerFilter(OwnedRowFilter):
    slug = django_filters.CharFilter(help_text="Exact slug.")
    is_active = django_filters.BooleanFilter(help_text="Only active (true) or inactive (false).")
    resource_pool = django_filters.UUIDFilter(
        field_name="resource_pool_id", help_text="Id of the pool the customer uses."
    )

    class Meta:
        model = Customer
        fields = ["link_id", "cid", "slug", "is_active", "resource_pool"]


class MembershipFilter(django_filters.FilterSet):
    role = django_filters.ChoiceFilter(
        choices=Membership.Role.choices, help_text="Only members with this role."
    )
    username = django_filters.CharFilter(field_name="user__username", help_text="Exact username.")

    class Meta:
        model = Membership
        fields = ["role", "username"]


class ResourcePoolFilter(OwnedRowFilter):
    owner = django_filters.UUIDFilter(field_name="owner_id", help_text="Id of the owning customer.")
    name = django_filters.CharFilter(help_text="Exact pool name.")

    class Meta:
        model = ResourcePool
        fields = ["link_id", "cid", "owner", "name"]


class InsightFilter(OwnedRowFilter):
    resource_pool = django_filters.UUIDFilter(
        field_name="resource_pool_id", help_text="Id of the insight's pool."
    )
    name = django_filters.CharFilter(help_text="Exact insight name.")
    is_global = django_filters.BooleanFilter(help_text="Only global (true) or restricted (false).")
    scheduling_algorithm = django_filters.ChoiceFilter(
        choices=Insight.Algorithm.choices, help_text="Only insights using this algorithm."
    )

    class Meta:
        model = Insight
        fields = ["link_id", "cid", "resource_pool", "name", "is_global", "scheduling_algorithm"]
