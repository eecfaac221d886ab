"""Facility writes: customers, members and their tokens, resource pools, insights (DESIGN §9).

Each public function checks the caller's role first and runs in one transaction.
"""

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from rest_framework.authtoken.models import Token

from resourcepools.models import Customer, Insight, Membership, ResourcePool
from resourcepools.selectors import (
    Principal,
    customer_ids_with_role,
    has_role,
    principal_is_staff,
    require_role,
)

Role = Membership.Role
#: What a customer admin may change on its own customer; the rest is the operator's (staff).
CUSTOMER_ADMIN_FIELDS = frozenset({"callback_url", "callback_secret", "link_id"})


def require_staff(principal: Principal | None) -> None:
    """Raise PermissionDenied (403) unless the principal is staff."""
    if not principal_is_staff(principal):
        raise PermissionDenied("Only staff may do this.")


def acting_customer(
    *, principal: Principal | None, customer: Customer | None, role: str, field: str = "customer"
) -> Customer:
    """The customer a write is for: the given one, or the caller's only one holding `role`."""
    if customer is not None:
        return customer
    if principal_is_staff(principal):
        raise ValidationError({field: ["This field is required for staff."]})
    customer_ids = customer_ids_with_role(principal, role)
    if len(customer_ids) != 1:
        message = (
            f"You are {role} of several customers: name one."
            if customer_ids
            else f"You are not {role} of any customer."
        )
        if not customer_ids:
            raise PermissionDenied(message)
        raise ValidationError({field: [message]})
    return Customer.objects.get(pk=customer_ids[0])


def _save_unique(instance: Any, *, update_fields: Iterable[str] | None, field: str) -> None:
    """Save, turning a unique-constraint clash into a 400 on `field`."""
    try:
        with transaction.atomic():
            instance.save(update_fields=update_fields)
    except IntegrityError as error:
        raise ValidationError({field: ["This name is already taken."]}) from error


def _apply(instance: Any, fields: dict[str, Any]) -> list[str]:
    for name, value in fields.items():
        setattr(instance, name, value)
    return [*fields, "updated_at"]


# --- customers -----------------------------------------------------------------------------


@transaction.atomic
def customer_create(*, principal: Principal | None, cid: str = "", **fields: Any) -> Customer:
    """Create a customer (staff only)."""
    require_staff(principal)
    customer = Customer(cid=cid, **fields)
    _save_unique(customer, update_fields=None, field="slug")
    return customer


@transaction.atomic
def customer_update(*, principal: Principal | None, customer: Customer, **fields: Any) -> Customer:
    """Change a customer: staff anything, the customer's admin only its callback settings."""
    if not principal_is_staff(principal):
        require_role(principal, customer.pk, Role.ADMIN)
        refused = sorted(set(fields) - CUSTOMER_ADMIN_FIELDS)
        if refused:
            raise PermissionDenied(f"Only staff may change {', '.join(refused)}.")
    customer = Customer.objects.select_for_update().get(pk=customer.pk)
    _save_unique(customer, update_fields=_apply(customer, fields), field="slug")
    return customer


@transaction.atomic
def customer_delete(*, principal: Principal | None, customer: Customer) -> None:
    """Delete a customer and everything it owns (staff only; refused while it owns a pool)."""
    require_staff(principal)
    customer.delete()


# --- members and tokens --------------------------------------------------------------------


def _admin_count(customer_id: object) -> int:
    return Membership.objects.filter(customer_id=customer_id, role=Role.ADMIN).count()


@transaction.atomic
def membership_create(
    *,
    principal: Principal | None,
    customer: Customer,
    username: str,
    role: str,
    email: str = "",
    password: str | None = None,
) -> Membership:
    """Add a user (created when new) to the customer with `role` (customer admin)."""
    require_role(principal, customer.pk, Role.ADMIN)
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    if user is None:
        user = user_model(username=username, email=email)
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        user.save()
    elif password:
        raise ValidationError(
            {"password": ["The user exists already; only a new user gets a password here."]}
        )
    try:
        with transaction.atomic():
            return Membership.objects.create(user=user, customer=customer, role=role)
    except IntegrityError as error:
        raise ValidationError(
            {"username": [f"{username} is already a member of {customer.slug}."]}
        ) from error


@transaction.atomic
def membership_update(
    *, principal: Principal | None, membership: Membership, role: str
) -> Membership:
    """Change a member's role (customer admin); a customer keeps at least one admin."""
    require_role(principal, membership.customer_id, Role.ADMIN)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    if membership.role == Role.ADMIN and role != Role.ADMIN:
        if _admin_count(membership.customer_id) <= 1:
            raise ValidationError({"role": ["A customer keeps at least one admin."]})
    membership.role = role
    membership.save(update_fields=["role", "updated_at"])
    return membership


@transaction.atomic
def membership_delete(*, principal: Principal | None, membership: Membership) -> None:
    """Remove a member (customer admin); a customer keeps at least one admin."""
    require_role(principal, membership.customer_id, Role.ADMIN)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    if membership.role == Role.ADMIN and _admin_count(membership.customer_id) <= 1:
        raise ValidationError({"role": ["A customer keeps at least one admin."]})
    membership.delete()


def _require_token_authority(principal: Principal | None, user: AbstractBaseUser) -> None:
    """A token acts with all of its user's rights, so only someone holding them may mint it."""
    if principal_is_staff(principal):
        return
    if user.is_staff or user.is_superuser:
        raise PermissionDenied("Only staff may issue or revoke a staff user's token.")
    foreign = [
        customer_id
        for customer_id in Membership.objects.filter(user=user).values_list(
            "customer_id", flat=True
        )
        if not has_role(principal, customer_id, Role.ADMIN)
    ]
    if foreign:
        raise PermissionDenied(
            "This user also belongs to customers you do not administer; ask staff."
        )


@transaction.atomic
def token_issue(*, principal: Principal | None, membership: Membership) -> Token:
    """Replace the member's API token with a new one (customer admin); returns it."""
    require_role(principal, membership.customer_id, Role.ADMIN)
    _require_token_authority(principal, membership.user)
    Token.objects.filter(user=membership.user).delete()
    return Token.objects.create(user=membership.user)


@transaction.atomic
def token_revoke(*, principal: Principal | None, membership: Membership) -> int:
    """Delete the member's API token (customer admin); returns how many were deleted."""
    require_role(principal, membership.customer_id, Role.ADMIN)
    _require_token_authority(principal, membership.user)
    return Token.objects.filter(user=membership.user).delete()[0]


# --- resource pools and insights ----------------------------------------------------------


@transaction.atomic
def resource_pool_create(
    *, principal: Principal | None, owner: Customer, cid: str = "", **fields: Any
) -> ResourcePool:
    """Create a pool run by `owner` (staff, or the owner's admin)."""
    require_role(principal, owner.pk, Role.ADMIN)
    pool = ResourcePool(owner=owner, cid=cid, **fields)
    _save_unique(pool, update_fields=None, field="name")
    return pool


@transaction.atomic
def resource_pool_update(
    *, principal: Principal | None, pool: ResourcePool, **fields: Any
) -> ResourcePool:
    """Change a pool (staff, or its owner's admin; only staff hand it to another owner)."""
    require_role(principal, pool.owner_id, Role.ADMIN)
    if "owner" in fields and fields["owner"].pk != pool.owner_id:
        require_staff(principal)
    pool = ResourcePool.objects.select_for_update().get(pk=pool.pk)
    _save_unique(pool, update_fields=_apply(pool, fields), field="name")
    return pool


@transaction.atomic
def resource_pool_delete(*, principal: Principal | None, pool: ResourcePool) -> None:
    """Delete a pool and its insights (staff, or its owner's admin)."""
    require_role(principal, pool.owner_id, Role.ADMIN)
    pool.delete()


@transaction.atomic
def insight_create(
    *,
    principal: Principal | None,
    resource_pool: ResourcePool,
    allowed_customers: list[Customer] | None = None,
    cid: str = "",
    **fields: Any,
) -> Insight:
    """Create an insight in a pool (staff, or the pool owner's admin)."""
    require_role(principal, resource_pool.owner_id, Role.ADMIN)
    insight = Insight(resource_pool=resource_pool, cid=cid, **fields)
    _save_unique(insight, update_fields=None, field="name")
    if allowed_customers:
        insight.allowed_customers.set(allowed_customers)
    return insight


@transaction.atomic
def insight_update(
    *,
    principal: Principal | None,
    insight: Insight,
    allowed_customers: list[Customer] | None = None,
    **fields: Any,
) -> Insight:
    """Change an insight (staff, or the pool owner's admin); it stays in its pool."""
    require_role(principal, insight.resource_pool.owner_id, Role.ADMIN)
    fields.pop("resource_pool", None)
    insight = (
        Insight.objects.select_for_update()
        .select_related("resource_pool__owner")
        .get(pk=insight.pk)
    )
    _save_unique(insight, update_fields=_apply(insight, fields), field="name")
    if allowed_customers is not None:
        insight.allowed_customers.set(allowed_customers)
    return insight


@transaction.atomic
def insight_delete(*, principal: Principal | None, insight: Insight) -> None:
    """Delete an insight (staff, or the pool owner's admin; refused while agendas use it)."""
    require_role(principal, insight.resource_pool.owner_id, Role.ADMIN)
    insight.delete()
