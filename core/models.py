"""Fields every customer-owned row carries (docs/design.md §3)."""

import uuid

from django.db import models


def link_id_field(*, db_index: bool = True) -> models.CharField:
    """The client-chosen grouping key. A history table passes `db_index=False` and declares a
    named plain index in its Meta instead: Django's `db_index` on PostgreSQL also builds a
    `varchar_pattern_ops` twin for LIKE, which no query here makes (filters and the admin's
    search are exact) and which every insert and non-HOT update would write."""
    return models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_index=db_index,
        help_text="Client-chosen grouping key.",
    )


def cid_field(*, db_index: bool = True) -> models.CharField:
    """The correlation id (X-POP-CID); `db_index` as for `link_id_field`."""
    return models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_index=db_index,
        help_text="Correlation id (X-POP-CID).",
    )


class OwnedModel(models.Model):
    """UUID key, grouping `link_id`, correlation `cid`, and timestamps."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    link_id = link_id_field()
    cid = cid_field()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
