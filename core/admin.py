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

    def get_fieldsets(self, request: Any, obj: Any = None) -> list[tuple[str | None, dict]]:
        """The row's name first; `link_id` and `cid` in a collapsed "Tracking" section last."""
        if self.fieldsets:
            return list(self.fieldsets)
        fields = self.get_fields(request, obj)
        first = [name for name in ("name",) if name in fields]
        main = first + [n for n in fields if n not in first and n not in BOOKKEEPING_FIELDS]
        tracking = [name for name in fields if name in BOOKKEEPING_FIELDS]
        fieldsets: list[tuple[str | None, dict]] = [(None, {"fields": main})]
        if tracking:
            fieldsets.append(
                (
                    "Tracking",
                    {
                        "fields": tracking,
                        "classes": ["collapse"],
                        "description": "Grouping key and correlation id; usually left empty.",
                    },
                )
            )
        return fieldsets
