"""Named API tokens: only a hash of each key is stored (django-rest-knox's token model).

A key is `token_key` (its first 15 characters, an index to find candidates) plus random hex;
the database keeps the SHA-512 `digest`, so a leaked table does not leak usable keys.
"""

import uuid

from django.db import models
from knox.models import AbstractAuthToken
from knox.settings import CONSTANTS


class ApiToken(AbstractAuthToken):
    """One named key of one user (a person's CLI, a worker Deployment); revoked by deletion."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    digest = models.CharField(max_length=CONSTANTS.DIGEST_LENGTH, unique=True, editable=False)
    token_key = models.CharField(
        max_length=CONSTANTS.MAXIMUM_TOKEN_PREFIX_LENGTH + CONSTANTS.TOKEN_KEY_LENGTH,
        db_index=True,
        editable=False,
    )
    name = models.CharField(max_length=100, help_text="What uses it: `laptop`, `worker-farm-a`.")
    last_used_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Updated at most once a minute."
    )

    class Meta:
        verbose_name = "API token"
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"

    def is_expired(self, now) -> bool:
        return self.expiry is not None and self.expiry <= now
