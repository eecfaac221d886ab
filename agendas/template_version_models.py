"""Template versions (docs/design.md §5.3): every saved change of a template's body, static
parameters or payload schema is a new immutable row, numbered from 1 per template. The
template's own fields mirror its latest version; its name, description and sharing are not
versioned."""

from django.conf import settings
from django.db import models

# The fields a version holds: what a run expands. A change of any of them is a new version.
VERSIONED_FIELDS = ("agenda", "static_parameters", "payload_schema")


class AgendaTemplateVersion(models.Model):
    # No index of its own: the unique (template, number) leads with it.
    template = models.ForeignKey(
        "agendas.AgendaTemplate",
        on_delete=models.CASCADE,
        related_name="versions",
        db_index=False,
    )
    number = models.PositiveIntegerField(help_text="1, 2, … per template; never reused.")
    agenda = models.JSONField(help_text="Agenda body with @<…> references (docs/design.md §5.3).")
    static_parameters = models.JSONField(default=dict, blank=True)
    payload_schema = models.JSONField(null=True, blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who saved it; empty for the scheduler, a migration or a deleted user.",
    )
    note = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["template", "-number"]
        constraints = [
            # Also the index of "a template's versions, newest first" and of a lookup by number.
            models.UniqueConstraint(fields=["template", "number"], name="template_version_number"),
            models.CheckConstraint(
                condition=models.Q(number__gte=1), name="template_version_number_from_1"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.template_id} v{self.number}"

    def fields(self) -> dict:
        """The versioned fields, by name."""
        return {name: getattr(self, name) for name in VERSIONED_FIELDS}
