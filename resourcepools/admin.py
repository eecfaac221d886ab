from django.contrib import admin

from core.admin import CustomerFilter, OwnedRowAdmin, exact_filter
from resourcepools.models import Customer, Insight, Membership, ResourcePool


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Customer)
class CustomerAdmin(OwnedRowAdmin):
    list_display = [
        "name",
        "slug",
        "is_active",
        "resource_pool",
        "weight",
        "max_executing",
        "rate_limit",
        "held",
    ]
    list_filter = ["is_active", "held", "resource_pool"]
    search_fields = ["name", "slug", "link_id"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "customer", "role", "created_at"]
    list_filter = ["role", CustomerFilter]
    search_fields = ["user__username", "customer__name", "customer__slug"]
    autocomplete_fields = ["user", "customer"]


class InsightInline(admin.StackedInline):
    model = Insight
    extra = 0
    fields = [
        "name",
        "queue_size",
        "scheduling_algorithm",
        "mappers",
        "order",
        "is_global",
        "lease_seconds",
        "max_execution_seconds",
        "execution_limit",
        "rate_limit",
        "rate_period_seconds",
        "paused",
    ]


@admin.register(ResourcePool)
class ResourcePoolAdmin(OwnedRowAdmin):
    list_display = ["name", "owner", "created_at"]
    # A text box, not a link per customer (core.admin.ExactFilter).
    list_filter = [exact_filter("owner", "owner__slug", "owner__id", placeholder="slug or id")]
    search_fields = ["name", "description", "link_id"]
    autocomplete_fields = ["owner"]
    inlines = [InsightInline]


@admin.register(Insight)
class InsightAdmin(OwnedRowAdmin):
    list_display = [
        "name",
        "resource_pool",
        "queue_size",
        "scheduling_algorithm",
        "order",
        "is_global",
        "execution_limit",
        "rate_limit",
        "paused",
    ]
    list_filter = ["resource_pool", "scheduling_algorithm", "is_global", "paused"]
    search_fields = ["name", "resource_pool__name", "link_id"]
    filter_horizontal = ["allowed_customers"]
