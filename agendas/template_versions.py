"""Reads and diffs of a template's versions (docs/design.md §5.3).

The template comes from the caller's scoped read (`agenda_template_list`): whoever may read a
template reads its versions (the visibility rule is the template's, docs/design.md §10.3). A
diff compares the versioned fields as pretty-printed JSON (sorted keys, indent 2), line by
line, with the standard library's difflib.
"""

import difflib
import json
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from agendas.models import AgendaTemplate, AgendaTemplateVersion
from agendas.template_version_models import VERSIONED_FIELDS

# Over this many lines a side, a diff is refused (400): difflib's cost grows with the product
# of the sides, and 10,000 lines stay well under a second. Templates that big are rare; their
# versions can still be read one by one and compared elsewhere.
MAX_DIFF_LINES = 10_000
CONTEXT_LINES = 3
# What `number` may be in a URL or a query: a PositiveIntegerField's range.
MAX_VERSION_NUMBER = 2_147_483_647


def template_version_list(*, template: AgendaTemplate) -> QuerySet[AgendaTemplateVersion]:
    """The versions of a template the caller may read, newest first (the unique
    (template, number) index serves the order)."""
    return (
        AgendaTemplateVersion.objects.filter(template=template)
        .select_related("author")
        .order_by("-number")
    )


def template_version_get(
    *, template: AgendaTemplate, number: int, field: str = "version"
) -> AgendaTemplateVersion:
    """Version `number` of the template; a ValidationError naming `field` when it has none."""
    found = template_version_list(template=template).filter(number=number).first()
    if found is None:
        raise ValidationError({field: [f"Template {template.name} has no version {number}."]})
    return found


def template_version_latest(*, template: AgendaTemplate) -> AgendaTemplateVersion | None:
    """The template's newest version; None for a template written around the services (a
    fixture, or before its first save through them)."""
    return template_version_list(template=template).first()


def version_text(fields: dict) -> list[str]:
    """The versioned fields as the lines a diff compares: JSON, sorted keys, indent 2."""
    shown = {name: fields.get(name) for name in VERSIONED_FIELDS}
    return json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


@dataclass(frozen=True)
class DiffRow:
    """One row of a side-by-side diff: `equal`, `replace`, `delete`, `insert`, or `skip`
    (unchanged lines left out: `left_number` is how many)."""

    kind: str
    left_number: int | None
    left: str
    right_number: int | None
    right: str


@dataclass(frozen=True)
class VersionDiff:
    old: int
    new: int
    unified: list[str]
    rows: list[DiffRow]

    @property
    def changed(self) -> bool:
        return bool(self.unified)


def _lines_checked(version: AgendaTemplateVersion, field: str) -> list[str]:
    lines = version_text(version.fields())
    if len(lines) > MAX_DIFF_LINES:
        raise ValidationError(
            {
                field: [
                    f"Version {version.number} has {len(lines)} lines; diffs stop at "
                    f"{MAX_DIFF_LINES}. Read the versions and compare them locally."
                ]
            }
        )
    return lines


def versions_diff(old: AgendaTemplateVersion, new: AgendaTemplateVersion) -> VersionDiff:
    """What changed from `old` to `new`: unified-diff lines (with 3 lines of context) and the
    rows of a side-by-side view; a ValidationError naming `from` or `to` past MAX_DIFF_LINES."""
    left, right = _lines_checked(old, "from"), _lines_checked(new, "to")
    unified = list(
        difflib.unified_diff(
            left,
            right,
            fromfile=f"version {old.number}",
            tofile=f"version {new.number}",
            n=CONTEXT_LINES,
            lineterm="",
        )
    )
    return VersionDiff(
        old=old.number, new=new.number, unified=unified, rows=side_by_side(left, right)
    )


def side_by_side(left: list[str], right: list[str]) -> list[DiffRow]:
    """Rows pairing the two sides' lines around each change, with 3 lines of context; the
    unchanged stretches between changes become one `skip` row. No change: no rows."""
    if left == right:
        return []
    matcher = difflib.SequenceMatcher(None, left, right)
    rows: list[DiffRow] = []
    shown_to = 0
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        if group[0][1] > shown_to:
            rows.append(DiffRow("skip", group[0][1] - shown_to, "", None, ""))
        for tag, i1, i2, j1, j2 in group:
            for offset in range(max(i2 - i1, j2 - j1)):
                i, j = i1 + offset, j1 + offset
                has_left, has_right = i < i2, j < j2
                kind = tag if tag in ("equal", "replace") else ("delete" if has_left else "insert")
                if tag == "replace" and not (has_left and has_right):
                    kind = "delete" if has_left else "insert"
                rows.append(
                    DiffRow(
                        kind,
                        i + 1 if has_left else None,
                        left[i] if has_left else "",
                        j + 1 if has_right else None,
                        right[j] if has_right else "",
                    )
                )
        shown_to = group[-1][2]
    if rows and shown_to < len(left):
        rows.append(DiffRow("skip", len(left) - shown_to, "", None, ""))
    return rows
