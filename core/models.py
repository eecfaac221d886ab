"""Fields every customer-owned row carries (docs/design.md §3)."""

import uuid

from django.db import models


class OwnedModel(models.Model):
    """UUID key, grouping `link_id`, correlation `cid`, and timestamps."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    link_id = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_index=True,
        help_text="Client-chosen grouping key.",
    )
    cid = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_index=True,
        help_text="Correlation id (X-POP-CID).",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
