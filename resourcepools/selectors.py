"""Who may see what (docs/design.md §10.3): every customer-visible read starts here."""

import functools

from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet, Value

from core.principals import Principal, SystemPrincipal, principal_is_staff
from core.rows import RowLoader, load_row, select_list
from resourcepools.mapping import InsightCandidate
from resourcepools.models import Customer, Insight, Membership, ResourcePool

Role = Membership.Role
# viewer < submitter < admin; `worker` is outside the ladder: it pulls and reports only.
ROLE_RANK: dict[str, int] = {Role.VIEWER: 1, Role.SUBMITTER: 2, Role.ADMIN: 3, Role.WORKER: 0}


def membership_roles(principal: Principal) -> dict:
    """Map customer id → role for the principal's memberships (cached on the user object)."""
    if isinstance(principal, SystemPrincipal):
        return {}
    cached = getattr(principal, "_pop_roles", None)
    if cached is None:
        cached = {}
        if principal is not None and principal.is_authenticated:
            cached = _active_memberships(principal.pk)
        principal._pop_roles = cached
    return cached


def _active_memberships(user_id: object) -> dict:
    """Customer id → role of the user's memberships of active customers: a hand-written read
    (core/rows.py), as nearly every API request makes it."""
    loader, sql = _memberships_query(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [user_id, True])
        rows = cursor.fetchall()
    memberships = [loader.load(list(row)) for row in rows]
    return {membership.customer_id: membership.role for membership in memberships}


@functools.cache
def _memberships_query(vendor: str) -> tuple[RowLoader, str]:
    loader = RowLoader(Membership, "m", frozenset({"id", "customer_id", "role"}))
    return loader, f"SELECT {', '.join(loader.columns)} {_memberships_source()}"


def _memberships_source() -> str:
    """`FROM … WHERE …` of a user's (first parameter) memberships of customers whose
    `is_active` is the second parameter, aliased `m`."""
    quote = connection.ops.quote_name
    return (
        f"FROM {quote(Membership._meta.db_table)} m "
        f"JOIN {quote(Customer._meta.db_table)} c ON c.{quote(Customer._meta.pk.column)} = "
        f"m.{quote(Membership._meta.get_field('customer').column)} "
        f"WHERE m.{quote(Membership._meta.get_field('user').column)} = %s "
        f"AND c.{quote(Customer._meta.get_field('is_active').column)} = %s"
    )


def has_role(principal: Principal, customer_id: object, role: str) -> bool:
    """Whether the principal holds `role` (or better) for the customer; staff hold every role."""
    if principal_is_staff(principal):
        return True
    held = membership_roles(principal).get(customer_id)
    if held is None:
        return False
    if role == Role.WORKER:
        return held in (Role.WORKER, Role.ADMIN)
    return ROLE_RANK[held] >= ROLE_RANK[role]


def require_role(principal: Principal, customer_id: object, role: str) -> None:
    """Raise PermissionDenied (403) unless the principal holds `role` for the customer."""
    if not has_role(principal, customer_id, role):
        raise PermissionDenied(f"This action needs the {role} role for this customer.")


def customer_ids_with_role(principal: Principal, role: str = Role.VIEWER) -> list:
    """Ids of the customers where the principal holds `role` (not meaningful for staff)."""
    return [
        customer_id
        for customer_id in membership_roles(principal)
        if has_role(principal, customer_id, role)
    ]


def customer_list(*, principal: Principal) -> QuerySet[Customer]:
    """Customers the principal may see: all for staff, else the ones they are a member of."""
    customers = Customer.objects.select_related("resource_pool")
    if principal_is_staff(principal):
        return customers
    return customers.filter(pk__in=list(membership_roles(principal)))


def membership_list(*, principal: Principal) -> QuerySet[Membership]:
    """Memberships of the customers the principal administers (staff: all).

    Each row carries `email_hidden`: true when its user also belongs to a customer the
    principal does not administer, whose user's e-mail is not the principal's to read.
    """
    memberships = Membership.objects.select_related("user", "customer")
    if principal_is_staff(principal):
        return memberships.annotate(email_hidden=Value(False))
    administered = customer_ids_with_role(principal, Role.ADMIN)
    elsewhere = Membership.objects.filter(user_id=OuterRef("user_id")).exclude(
        customer_id__in=administered
    )
    return memberships.filter(customer_id__in=administered).annotate(email_hidden=Exists(elsewhere))


def insight_sharing_customers(*, principal: Principal) -> QuerySet[Customer]:
    """Customers the principal may name in an insight's `allowed_customers`: all for staff;
    else its own customers and the customers of pools they own (the service narrows that to
    the insight's pool)."""
    if principal_is_staff(principal):
        return Customer.objects.all()
    customer_ids = list(membership_roles(principal))
    return Customer.objects.filter(
        Q(pk__in=customer_ids) | Q(resource_pool__owner_id__in=customer_ids)
    )


def resource_pool_list(*, principal: Principal) -> QuerySet[ResourcePool]:
    """Pools the principal may see: owned by one of its customers, or used by one of them."""
    pools = ResourcePool.objects.select_related("owner")
    if principal_is_staff(principal):
        return pools
    customer_ids = list(membership_roles(principal))
    return pools.filter(Q(owner_id__in=customer_ids) | Q(customers__in=customer_ids)).distinct()


def insight_list(*, principal: Principal) -> QuerySet[Insight]:
    """Insights visible to the principal: of pools its customers own, global, or shared with it."""
    insights = Insight.objects.select_related("resource_pool", "resource_pool__owner")
    if principal_is_staff(principal):
        return insights
    customer_ids = list(membership_roles(principal))
    visible = Insight.objects.filter(
        Q(resource_pool__owner_id__in=customer_ids)
        | Q(is_global=True)
        | Q(allowed_customers__in=customer_ids)
        | Q(resource_pool__customers__in=customer_ids, allowed_customers__isnull=True)
    ).values("pk")
    return insights.filter(pk__in=visible)


def insight_visible_get(*, principal: Principal, insight_id: object) -> Insight | None:
    """The insight with its pool when the principal may see it (as `insight_list` decides),
    else None.

    A worker or admin of the pool's owner (or staff) certainly may: one plain read, because
    this serves the pull, the puller API's hottest call; anyone else goes through
    `insight_list`, so what they see is exactly what they would see listing insights.
    """
    insight = _insight_with_pool(insight_id, principal)
    if insight is None or has_role(principal, insight.resource_pool.owner_id, Role.WORKER):
        return insight
    return insight if insight_list(principal=principal).filter(pk=insight_id).exists() else None


def _insight_with_pool(insight_id: object, principal: Principal) -> Insight | None:
    """The insight with its pool loaded, by a hand-written join (core/rows.py): the pull's
    first read. A malformed id is a ValidationError, as the ORM's filter raises it.

    On PostgreSQL the same statement reads the principal's roles when this request has not
    read them yet (`membership_roles` then answers from them): the pull's permission check
    costs no second round trip."""
    pk = Insight._meta.pk.to_python(insight_id)
    read_roles = connection.vendor == "postgresql" and _roles_unread(principal)
    loaders, sql = _insight_query(connection.vendor, read_roles)
    params = [Insight._meta.pk.get_db_prep_value(pk, connection)]
    if read_roles:
        params = [principal.pk, True, *params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    if read_roles:
        *row, customer_ids, roles = row
        principal._pop_roles = dict(zip(customer_ids or [], roles or [], strict=True))
    insight, pool = load_row(loaders, row)
    insight.resource_pool = pool
    return insight


def _roles_unread(principal: Principal) -> bool:
    """Whether `membership_roles` would read the principal's memberships (staff need none)."""
    return (
        principal is not None
        and not isinstance(principal, SystemPrincipal)
        and principal.is_authenticated
        and getattr(principal, "_pop_roles", None) is None
        and not principal_is_staff(principal)
    )


@functools.cache
def _insight_query(vendor: str, read_roles: bool) -> tuple[list[RowLoader], str]:
    loaders = [RowLoader(Insight, "i"), RowLoader(ResourcePool, "r")]
    quote = connection.ops.quote_name
    roles, roles_columns = "", ""
    if read_roles:
        # The rows `_memberships_query` reads, as two arrays in step (one aggregation pass;
        # an aggregate without GROUP BY is one row, of NULLs when there are none).
        customer = quote(Membership._meta.get_field("customer").column)
        role = quote(Membership._meta.get_field("role").column)
        roles = (
            f"CROSS JOIN LATERAL (SELECT array_agg(m.{customer}) AS customer_ids, "
            f"array_agg(m.{role}) AS roles {_memberships_source()}) ms "
        )
        roles_columns = ", ms.customer_ids, ms.roles"
    sql = (
        f"SELECT {select_list(loaders)}"
        f"{roles_columns} "
        f"FROM {quote(Insight._meta.db_table)} i "
        f"JOIN {quote(ResourcePool._meta.db_table)} r "
        f"ON r.{quote(ResourcePool._meta.pk.column)} = "
        f"i.{quote(Insight._meta.get_field('resource_pool').column)} "
        f"{roles}"
        f"WHERE i.{quote(Insight._meta.pk.column)} = %s"
    )
    return loaders, sql


def insight_candidates_for(customer: Customer) -> list[InsightCandidate]:
    """Insights of the customer's pool it may submit to (global, owned, or allowed; docs/design.md
    §5.1)."""
    if customer.resource_pool_id is None:
        return []
    insights = Insight.objects.filter(resource_pool_id=customer.resource_pool_id).filter(
        Q(is_global=True)
        | Q(resource_pool__owner_id=customer.pk)
        | Q(allowed_customers=customer.pk)
        | Q(allowed_customers__isnull=True)
    )
    return [
        InsightCandidate(
            id=str(insight.pk),
            name=insight.name,
            order=insight.order,
            created_at=insight.created_at,
            mappers=insight.mappers,
        )
        for insight in insights.distinct().order_by("order", "created_at")
    ]
