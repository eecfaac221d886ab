"""Who acts: a user (staff, or a member of customers) or the scheduler itself.

Every service and selector takes a `principal`. The scheduler's own work (timed processes,
cron runs, the demo loader, a service acting for another that checked authority already)
passes `SYSTEM`, by name: a missing principal (`None`) is refused, never taken for the system
(one forgotten argument must not grant everything).
"""

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


class SystemPrincipal:
    """The scheduler itself: every right, as staff; no user row, no memberships."""

    is_staff = True
    is_superuser = False
    is_active = True
    is_authenticated = True
    is_anonymous = False
    pk = None

    def get_username(self) -> str:
        return "system"

    def __repr__(self) -> str:
        return "SYSTEM"


SYSTEM = SystemPrincipal()
Principal = AbstractBaseUser | AnonymousUser | SystemPrincipal


def principal_is_staff(principal: Principal) -> bool:
    """True for the scheduler itself (SYSTEM) and for staff users; a missing principal is a
    programming error, not a grant."""
    if principal is None:
        raise TypeError("No principal given: pass the caller, or SYSTEM for the scheduler itself.")
    return principal is SYSTEM or bool(getattr(principal, "is_staff", False))
