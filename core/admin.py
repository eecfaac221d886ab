"""What the admin of every owned row shares."""

from typing import Any

from django.contrib import admin

# Bookkeeping an operator rarely sets by hand: last on a form, not first.
BOOKKEEPING_FIELDS = ("link_id", "cid")


class OwnedRowAdmin(admin.ModelAdmin):
    """A model admin whose form ends with the grouping `link_id` and correlation `cid`."""

    def get_fields(self, request: Any, obj: Any = None) -> list[str]:
        fields = list(super().get_fields(request, obj))
        return [name for name in fields if name not in BOOKKEEPING_FIELDS] + [
            name for name in BOOKKEEPING_FIELDS if name in fields
        ]
