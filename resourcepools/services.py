"""Facility writes: customers, members and their tokens, resource pools, insights (docs/design.md
§10.3).

Each public function checks the caller's role first and runs in one transaction.
"""

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from accounts import services as tokens
from accounts.models import ApiToken
from accounts.selectors import token_list_for_user
from audit.services import audit_record
from core.principals import SYSTEM
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
CUSTOMER_ADMIN_FIELDS = frozenset({"callback_url", "callback_secret", "link_id", "held"})


def require_staff(principal: Principal) -> None:
    """Raise PermissionDenied (403) unless the principal is staff."""
    if not principal_is_staff(principal):
        raise PermissionDenied("Only staff may do this.")


def acting_customer(
    *, principal: Principal, customer: Customer | None, role: str, field: str = "customer"
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
def customer_create(*, principal: Principal, cid: str = "", **fields: Any) -> Customer:
    """Create a customer (staff only)."""
    require_staff(principal)
    customer = Customer(cid=cid, **fields)
    _save_unique(customer, update_fields=None, field="slug")
    audit_record(action="customer.create", target=customer, detail={"slug": customer.slug})
    return customer


@transaction.atomic
def customer_update(*, principal: Principal, customer: Customer, **fields: Any) -> Customer:
    """Change a customer: staff anything, the customer's admin only its callback settings and
    whether it is held."""
    if not principal_is_staff(principal):
        require_role(principal, customer.pk, Role.ADMIN)
        refused = sorted(set(fields) - CUSTOMER_ADMIN_FIELDS)
        if refused:
            raise PermissionDenied(f"Only staff may change {', '.join(refused)}.")
    customer = Customer.objects.select_for_update().get(pk=customer.pk)
    _save_unique(customer, update_fields=_apply(customer, fields), field="slug")
    audit_record(action="customer.update", target=customer, detail={"fields": sorted(fields)})
    return customer


@transaction.atomic
def customer_delete(*, principal: Principal, customer: Customer) -> None:
    """Delete a customer and everything it owns (staff only; refused while it owns a pool)."""
    require_staff(principal)
    audit_record(action="customer.delete", target=customer, detail={"slug": customer.slug})
    customer.delete()


# --- members and tokens --------------------------------------------------------------------


#: The one answer for a username a customer admin may not use: taken, or a user it may not attach.
USERNAME_REFUSED = "This username cannot be used."


def _may_attach(principal: Principal, user: AbstractBaseUser) -> bool:
    """Whether the principal may make an existing user a member: staff, or an admin of one of
    the customers the user already belongs to (a user of its own)."""
    if principal_is_staff(principal):
        return True
    return Membership.objects.filter(
        user=user, customer_id__in=customer_ids_with_role(principal, Role.ADMIN)
    ).exists()


def _admin_count(customer_id: object) -> int:
    return Membership.objects.filter(customer_id=customer_id, role=Role.ADMIN).count()


@transaction.atomic
def membership_create(
    *,
    principal: Principal,
    customer: Customer,
    username: str,
    role: str,
    email: str = "",
    password: str | None = None,
) -> Membership:
    """Add a user to the customer with `role` (customer admin): a new username creates the
    user; an existing user is attached only by staff, or by an admin of another customer the
    user belongs to. Any other existing username gets the answer of a taken one
    (USERNAME_REFUSED), so the answer never tells whether another customer's user exists."""
    require_role(principal, customer.pk, Role.ADMIN)
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    if user is None:
        user = user_model(username=username, email=email)
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        try:
            with transaction.atomic():
                user.save()
        except IntegrityError as error:  # created meanwhile by another request
            raise ValidationError({"username": [USERNAME_REFUSED]}) from error
    elif not _may_attach(principal, user):
        raise ValidationError({"username": [USERNAME_REFUSED]})
    elif password:
        raise ValidationError(
            {"password": ["The user exists already; only a new user gets a password here."]}
        )
    try:
        with transaction.atomic():
            membership = Membership.objects.create(user=user, customer=customer, role=role)
            audit_record(
                action="member.create", target=membership, detail={"user": username, "role": role}
            )
            return membership
    except IntegrityError as error:
        raise ValidationError(
            {"username": [f"{username} is already a member of {customer.slug}."]}
        ) from error


@transaction.atomic
def membership_update(*, principal: Principal, membership: Membership, role: str) -> Membership:
    """Change a member's role (customer admin); a customer keeps at least one admin."""
    require_role(principal, membership.customer_id, Role.ADMIN)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    if membership.role == Role.ADMIN and role != Role.ADMIN:
        if _admin_count(membership.customer_id) <= 1:
            raise ValidationError({"role": ["A customer keeps at least one admin."]})
    audit_record(
        action="member.update",
        target=membership,
        detail={"user": membership.user.get_username(), "from": membership.role, "to": role},
    )
    membership.role = role
    membership.save(update_fields=["role", "updated_at"])
    return membership


@transaction.atomic
def membership_delete(*, principal: Principal, membership: Membership) -> None:
    """Remove a member (customer admin); a customer keeps at least one admin."""
    require_role(principal, membership.customer_id, Role.ADMIN)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    if membership.role == Role.ADMIN and _admin_count(membership.customer_id) <= 1:
        raise ValidationError({"role": ["A customer keeps at least one admin."]})
    audit_record(
        action="member.delete",
        target=membership,
        detail={"user": membership.user.get_username(), "role": membership.role},
    )
    membership.delete()


def _require_token_authority(principal: Principal, user: AbstractBaseUser) -> None:
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


MEMBER_TOKEN_NAME = "api"


@transaction.atomic
def token_issue(
    *,
    principal: Principal,
    membership: Membership,
    name: str = MEMBER_TOKEN_NAME,
    lifetime: Any = tokens.Lifetime.DEFAULT,
) -> tokens.IssuedToken:
    """A new named API token for the member (customer admin), replacing the member's token of
    the same name (a rotation); the member's other tokens stay. The key is returned once."""
    require_role(principal, membership.customer_id, Role.ADMIN)
    _require_token_authority(principal, membership.user)
    audit_record(action="member.token_issue", target=membership, detail={"name": name})
    ApiToken.objects.filter(user=membership.user, name=name.strip()).delete()
    return tokens.token_issue(principal=SYSTEM, user=membership.user, name=name, lifetime=lifetime)


@transaction.atomic
def token_revoke(*, principal: Principal, membership: Membership, token_id: object = None) -> int:
    """Revoke one of the member's API tokens (`token_id`), or all of them (customer admin);
    returns how many were revoked."""
    require_role(principal, membership.customer_id, Role.ADMIN)
    _require_token_authority(principal, membership.user)
    audit_record(action="member.token_revoke", target=membership, detail={"token": token_id})
    if token_id is None:
        return tokens.tokens_revoke_for_user(principal=SYSTEM, user=membership.user)
    return ApiToken.objects.filter(user=membership.user, pk=token_id).delete()[0]


def member_token_list(*, principal: Principal, membership: Membership) -> Any:
    """The member's API tokens, for a customer admin who may issue them (a read)."""
    require_role(principal, membership.customer_id, Role.ADMIN)
    _require_token_authority(principal, membership.user)
    return token_list_for_user(user=membership.user)


# --- resource pools and insights ----------------------------------------------------------


@transaction.atomic
def resource_pool_create(
    *, principal: Principal, owner: Customer, cid: str = "", **fields: Any
) -> ResourcePool:
    """Create a pool run by `owner` (staff only: staff decide which customers use a pool)."""
    require_staff(principal)
    pool = ResourcePool(owner=owner, cid=cid, **fields)
    _save_unique(pool, update_fields=None, field="name")
    audit_record(action="pool.create", customer=owner, target=pool, detail={"name": pool.name})
    return pool


@transaction.atomic
def resource_pool_update(
    *, principal: Principal, pool: ResourcePool, **fields: Any
) -> ResourcePool:
    """Change a pool (staff, or its owner's admin; only staff hand it to another owner)."""
    require_role(principal, pool.owner_id, Role.ADMIN)
    if "owner" in fields and fields["owner"].pk != pool.owner_id:
        require_staff(principal)
    pool = ResourcePool.objects.select_for_update().get(pk=pool.pk)
    _save_unique(pool, update_fields=_apply(pool, fields), field="name")
    audit_record(
        action="pool.update", customer=pool.owner_id, target=pool, detail={"fields": sorted(fields)}
    )
    return pool


@transaction.atomic
def resource_pool_delete(*, principal: Principal, pool: ResourcePool) -> None:
    """Delete a pool and its insights (staff, or its owner's admin)."""
    require_role(principal, pool.owner_id, Role.ADMIN)
    audit_record(
        action="pool.delete", customer=pool.owner_id, target=pool, detail={"name": pool.name}
    )
    pool.delete()


def _require_staff_for_global(principal: Principal) -> None:
    """A global insight is offered to every customer of its pool and listed to all customers:
    only staff make an insight global or restricted again (403)."""
    if not principal_is_staff(principal):
        raise PermissionDenied("Only staff may change is_global.")


def _require_sharing_within_pool(
    principal: Principal, pool: ResourcePool, customers: Iterable[Customer]
) -> None:
    """A pool owner's admin shares an insight only with the pool's owner and the customers
    staff assigned to the pool (400 on allowed_customers); staff share with anyone."""
    if principal_is_staff(principal):
        return
    inside = set(
        Customer.objects.filter(Q(resource_pool=pool) | Q(pk=pool.owner_id)).values_list(
            "pk", flat=True
        )
    )
    outside = sorted(str(customer.pk) for customer in customers if customer.pk not in inside)
    if outside:
        raise ValidationError(
            {
                "allowed_customers": [
                    f"Customer {pk} does not use this pool; only staff share beyond it."
                    for pk in outside
                ]
            }
        )


@transaction.atomic
def insight_create(
    *,
    principal: Principal,
    resource_pool: ResourcePool,
    allowed_customers: list[Customer] | None = None,
    cid: str = "",
    **fields: Any,
) -> Insight:
    """Create an insight in a pool (staff, or the pool owner's admin: not global, and shared
    only with the pool's customers)."""
    require_role(principal, resource_pool.owner_id, Role.ADMIN)
    if fields.get("is_global"):
        _require_staff_for_global(principal)
    _require_sharing_within_pool(principal, resource_pool, allowed_customers or [])
    insight = Insight(resource_pool=resource_pool, cid=cid, **fields)
    _save_unique(insight, update_fields=None, field="name")
    if allowed_customers:
        insight.allowed_customers.set(allowed_customers)
    audit_record(action="insight.create", customer=resource_pool.owner_id, target=insight)
    return insight


@transaction.atomic
def insight_update(
    *,
    principal: Principal,
    insight: Insight,
    allowed_customers: list[Customer] | None = None,
    **fields: Any,
) -> Insight:
    """Change an insight (staff, or the pool owner's admin: not `is_global`, and sharing added
    only with the pool's customers); it stays in its pool."""
    require_role(principal, insight.resource_pool.owner_id, Role.ADMIN)
    fields.pop("resource_pool", None)
    insight = (
        Insight.objects.select_for_update()
        .select_related("resource_pool__owner")
        .get(pk=insight.pk)
    )
    if "is_global" in fields and fields["is_global"] != insight.is_global:
        _require_staff_for_global(principal)
    if allowed_customers is not None:
        already = set(insight.allowed_customers.values_list("pk", flat=True))
        added = [customer for customer in allowed_customers if customer.pk not in already]
        _require_sharing_within_pool(principal, insight.resource_pool, added)
    _save_unique(insight, update_fields=_apply(insight, fields), field="name")
    if allowed_customers is not None:
        insight.allowed_customers.set(allowed_customers)
    audit_record(
        action="insight.update",
        customer=insight.resource_pool.owner_id,
        target=insight,
        detail={"fields": sorted(fields), "shared_with": allowed_customers},
    )
    return insight


@transaction.atomic
def insight_delete(*, principal: Principal, insight: Insight) -> None:
    """Delete an insight (staff, or the pool owner's admin; refused while agendas use it)."""
    require_role(principal, insight.resource_pool.owner_id, Role.ADMIN)
    audit_record(action="insight.delete", customer=insight.resource_pool.owner_id, target=insight)
    insight.delete()
