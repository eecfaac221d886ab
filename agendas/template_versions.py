"""Reads and diffs of a template's versions (docs/design.md §5.3).

The template comes from the caller's scoped read (`agenda_template_list`): whoever may read a
template reads its versions (the visibility rule is the template's, docs/design.md §10.3). A
diff compares the versioned fields as pretty-printed JSON (sorted keys, indent 2), line by
line, with the standard library's difflib.
"""

import difflib
import json
from dataclasses import dataclass
from functools import cached_property

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from agendas.models import AgendaTemplate, AgendaTemplateVersion
from agendas.template_version_models import VERSIONED_FIELDS

# A diff reads both sides whole (JSON, then a scan for the common head and tail: linear work),
# up to this many lines or characters a side; past that it is refused (400 naming the side).
MAX_DIFF_LINES = 20_000
MAX_DIFF_CHARS = 1_000_000
# difflib's matcher runs only on the lines between the common head and tail, and its worst
# case grows with the cube of their number: 1,000 lines a side take about 0.3 s of CPU on an
# adversarial input (tests/agendas/test_template_versions_diff_cost.py). Past that: 400.
MAX_CHANGED_LINES = 1_000
# Versions never change: a computed diff (its grouped opcodes, at most a few thousand small
# tuples given the caps) is kept in the cache under the two versions' ids.
DIFF_CACHE_SECONDS = 24 * 60 * 60
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


Group = list[tuple[str, int, int, int, int]]


@dataclass(frozen=True)
class VersionDiff:
    """The changes from version `old` to `new` as difflib's grouped opcodes (3 lines of
    context); `unified` and `rows` render them, each only when a caller asks for it."""

    old: int
    new: int
    left: list[str]
    right: list[str]
    groups: list[Group]

    @property
    def changed(self) -> bool:
        return bool(self.groups)

    @cached_property
    def unified(self) -> list[str]:
        return unified_lines(self.left, self.right, self.groups, old=self.old, new=self.new)

    @cached_property
    def rows(self) -> list[DiffRow]:
        return side_by_side_rows(self.left, self.right, self.groups)


def _lines_checked(version: AgendaTemplateVersion, field: str) -> list[str]:
    lines = version_text(version.fields())
    size = sum(len(line) for line in lines)
    if len(lines) > MAX_DIFF_LINES or size > MAX_DIFF_CHARS:
        raise ValidationError(
            {
                field: [
                    f"Version {version.number} has {len(lines)} lines ({size} characters); "
                    f"diffs stop at {MAX_DIFF_LINES} lines or {MAX_DIFF_CHARS} characters. "
                    "Read the versions and compare them locally."
                ]
            }
        )
    return lines


def version_is_large(version: AgendaTemplateVersion) -> bool:
    """Whether the version is too long to diff unasked (the template page's default)."""
    lines = version_text(version.fields())
    return len(lines) > MAX_CHANGED_LINES or sum(len(line) for line in lines) > MAX_DIFF_CHARS


def versions_diff(old: AgendaTemplateVersion, new: AgendaTemplateVersion) -> VersionDiff:
    """What changed from `old` to `new`, matched once (and cached: versions never change);
    a ValidationError naming `from` or `to` past MAX_DIFF_LINES or MAX_DIFF_CHARS, or when
    the changed stretch between the common head and tail is past MAX_CHANGED_LINES."""
    left, right = _lines_checked(old, "from"), _lines_checked(new, "to")
    key = f"pop:template-diff:v1:{old.pk}:{new.pk}" if old.pk and new.pk else None
    groups = cache.get(key) if key else None
    if groups is None:
        groups = grouped_opcodes(left, right, old=old.number, new=new.number)
        if key:
            cache.set(key, groups, DIFF_CACHE_SECONDS)
    return VersionDiff(old=old.number, new=new.number, left=left, right=right, groups=groups)


def grouped_opcodes(left: list[str], right: list[str], *, old: int, new: int) -> list[Group]:
    """difflib's grouped opcodes of the two sides, the matcher run only on the lines between
    their common head and tail (an edit to a long template stays cheap); a ValidationError
    when that stretch is past MAX_CHANGED_LINES on either side (difflib's worst case grows
    with the cube of it)."""
    if left == right:
        return []
    head = 0
    while head < min(len(left), len(right)) and left[head] == right[head]:
        head += 1
    tail = 0
    while tail < min(len(left), len(right)) - head and left[-1 - tail] == right[-1 - tail]:
        tail += 1
    middle_left, middle_right = left[head : len(left) - tail], right[head : len(right) - tail]
    too_long = {
        field: [
            f"Versions {old} and {new} differ over {len(middle)} lines of version {number}; "
            f"diffs stop at {MAX_CHANGED_LINES}. Read the versions and compare them locally."
        ]
        for field, number, middle in (("from", old, middle_left), ("to", new, middle_right))
        if len(middle) > MAX_CHANGED_LINES
    }
    if too_long:
        raise ValidationError(too_long)
    matcher = difflib.SequenceMatcher(None, middle_left, middle_right)
    codes: list[tuple[str, int, int, int, int]] = []
    if head:
        codes.append(("equal", 0, head, 0, head))
    # The middle neither starts nor ends with an equal stretch: its first and last lines differ.
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        codes.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        codes.append(("equal", len(left) - tail, len(left), len(right) - tail, len(right)))
    return [list(group) for group in _Computed(codes).get_grouped_opcodes(CONTEXT_LINES)]


class _Computed(difflib.SequenceMatcher):
    """difflib's grouping (get_grouped_opcodes) over opcodes already computed."""

    def __init__(self, codes: list[tuple[str, int, int, int, int]]) -> None:
        super().__init__(None, [], [])
        self.codes = codes

    def get_opcodes(self) -> list[tuple[str, int, int, int, int]]:
        return self.codes


def _range(start: int, stop: int) -> str:
    """A unified diff's `start,length` (difflib's format: 1-based; an empty range is
    numbered by the line before it)."""
    length = stop - start
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def unified_lines(
    left: list[str], right: list[str], groups: list[Group], *, old: int, new: int
) -> list[str]:
    """The unified diff of the groups, line for line what difflib.unified_diff writes."""
    if not groups:
        return []
    lines = [f"--- version {old}", f"+++ version {new}"]
    for group in groups:
        first, last = group[0], group[-1]
        lines.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(" " + line for line in left[i1:i2])
                continue
            if tag in ("replace", "delete"):
                lines.extend("-" + line for line in left[i1:i2])
            if tag in ("replace", "insert"):
                lines.extend("+" + line for line in right[j1:j2])
    return lines


def side_by_side(left: list[str], right: list[str]) -> list[DiffRow]:
    """Rows pairing the two sides' lines around each change (small inputs: tests, tools)."""
    return side_by_side_rows(left, right, grouped_opcodes(left, right, old=0, new=0))


def side_by_side_rows(left: list[str], right: list[str], groups: list[Group]) -> list[DiffRow]:
    """Rows pairing the two sides' lines around each change, with 3 lines of context; the
    unchanged stretches between changes become one `skip` row. No change: no rows."""
    rows: list[DiffRow] = []
    shown_to = 0
    for group in groups:
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
