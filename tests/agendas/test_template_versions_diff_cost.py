"""What a template diff may cost (docs/design.md §5.3): difflib runs once, only on the lines
between the two versions' common head and tail, within caps that keep its worst case well under
a second; a computed diff is cached; the template page does not diff long versions unasked."""

import difflib
import random
import time
from unittest import mock

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from agendas.template_services import agenda_template_create, agenda_template_update
from agendas.template_versions import (
    MAX_CHANGED_LINES,
    grouped_opcodes,
    template_version_get,
    unified_lines,
    versions_diff,
)

pytestmark = pytest.mark.django_db


def body(values: list[str]) -> dict:
    return {"operations": [{"name": "p", "type": "mediainfo", "payload": {"l": values}}]}


@pytest.fixture
def make_big(admin_member, insight):
    """A template whose versions hold the given lists (one JSON line per value)."""

    def make(*bodies: list[str]):
        template = agenda_template_create(
            principal=admin_member.user,
            customer=admin_member.customer,
            name="big",
            agenda=body(bodies[0]),
        )
        for values in bodies[1:]:
            agenda_template_update(
                principal=admin_member.user, template=template, agenda=body(values)
            )
        return template

    return make


def adversarial(n: int) -> tuple[list[str], list[str]]:
    """The slowest shape found for difflib at n lines: each value just under its "popular"
    (autojunk) threshold, the other side a stride through the same values."""
    occurrences = n // 100 + 1
    values = -(-n // occurrences)
    return [f"v{i % values}" for i in range(n)], [f"v{(i * 3) % values}" for i in range(n)]


def test_the_worst_allowed_changed_stretch_diffs_well_under_a_second():
    left, right = adversarial(MAX_CHANGED_LINES)

    started = time.process_time()
    groups = grouped_opcodes(left, right, old=1, new=2)
    spent = time.process_time() - started

    assert groups and spent < 1.0


def test_two_long_versions_differing_throughout_are_refused_quickly_naming_the_side(
    make_big, submitter, api_client_for
):
    template = make_big(
        [f"v{i // 99}" for i in range(9_900)], [f"v{i % 101}" for i in range(9_900)]
    )
    client = api_client_for(submitter)

    started = time.process_time()
    response = client.get(f"/api/v1/agenda-templates/{template.pk}/versions/diff/?from=1&to=2")
    spent = time.process_time() - started

    assert response.status_code == 400
    assert list(response.json()) == ["from", "to"]
    assert "differ over 9899 lines of version 1; diffs stop at 1000" in response.json()["from"][0]
    assert spent < 1.0
    assert template.versions.count() == 2


def test_a_small_edit_to_a_long_template_diffs_to_just_that_edit(
    make_big, submitter, api_client_for
):
    values = [f"v{i}" for i in range(15_000)]
    edited = [*values[:7_000], "new", *values[7_001:]]
    template = make_big(values, edited)
    client = api_client_for(submitter)

    response = client.get(f"/api/v1/agenda-templates/{template.pk}/versions/diff/?from=1&to=2")

    assert response.status_code == 200
    changed = [line for line in response.json()["diff"] if line[:1] in "+-"]
    assert changed == [
        "--- version 1",
        "+++ version 2",
        '-            "v7000",',
        '+            "new",',
    ]


def sides(seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    return (
        [rng.choice("abcde") for _ in range(rng.randrange(0, 40))],
        [rng.choice("abcde") for _ in range(rng.randrange(0, 40))],
    )


@pytest.mark.parametrize("seed", range(30))
def test_the_unified_lines_are_what_difflib_unified_diff_writes_for_the_same_opcodes(seed):
    left, right = sides(seed)
    groups = list(difflib.SequenceMatcher(None, left, right).get_grouped_opcodes(3))

    ours = unified_lines(left, right, groups, old=1, new=2)

    expected = difflib.unified_diff(
        left, right, fromfile="version 1", tofile="version 2", n=3, lineterm=""
    )
    assert ours == list(expected)


@pytest.mark.parametrize("seed", range(30))
def test_the_trimmed_opcodes_turn_the_old_side_into_the_new(seed):
    left, right = sides(seed)
    groups = grouped_opcodes(left, right, old=1, new=2)
    rebuilt, read_to = [], 0

    for tag, i1, i2, j1, j2 in (code for group in groups for code in group):
        rebuilt += left[read_to:i1]
        rebuilt += left[i1:i2] if tag == "equal" else right[j1:j2]
        read_to = i2
    rebuilt += left[read_to:]

    assert rebuilt == right
    assert (groups == []) == (left == right)


def test_a_diff_runs_the_matcher_once_and_then_comes_from_the_cache(make_big):
    template = make_big(["a", "b", "c"], ["a", "x", "c"])
    old, new = (template_version_get(template=template, number=n) for n in (1, 2))
    cache.clear()

    with mock.patch.object(
        difflib.SequenceMatcher,
        "get_matching_blocks",
        autospec=True,
        side_effect=difflib.SequenceMatcher.get_matching_blocks,
    ) as matched:
        first = versions_diff(old, new)
        second = versions_diff(old, new)

    assert matched.call_count == 1
    assert first.unified == second.unified and [r.kind for r in second.rows].count("replace") == 1


def test_the_template_page_offers_a_long_templates_latest_change_without_diffing_it(
    make_big, submitter
):
    values = [f"v{i}" for i in range(MAX_CHANGED_LINES + 1)]
    template = make_big(values, [*values[:-1], "last"])
    browser = Client()
    browser.force_login(submitter.user)
    page_url = reverse("pages:template-detail", args=[template.pk])

    with mock.patch("agendas.views.versions_diff") as diffed:
        response = browser.get(page_url)
    asked = browser.get(page_url, {"from": "1", "to": "2"})

    page = response.content.decode()
    assert response.status_code == 200 and diffed.call_count == 0
    assert 'id="diff-offered"' in page and 'id="diff-table"' not in page
    assert "?from=1&amp;to=2#diff" in page
    table = asked.content.decode().split('id="diff-table"', 1)[1].split("</table>", 1)[0]
    assert asked.status_code == 200 and table.count('class="diff-replace"') == 1
