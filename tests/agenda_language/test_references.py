import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenda_language.references import (
    REFERENCE_PATTERN,
    Reference,
    UnresolvedReferences,
    expand_template,
    find_references,
    referenced_operation_names,
    resolve_references,
)

MEDIA = {"mediaProperties": {"width": 1920, "height": 1080, "hdr": False}, "tags": ["a", "b"]}


def test_pattern_captures_name_and_path():
    match = REFERENCE_PATTERN.fullmatch("@<mediainfo.1.out::/mediaProperties/width>")

    assert match is not None
    assert match.group("reference") == "mediainfo.1.out"
    assert match.group("path") == "/mediaProperties/width"


def test_find_references_parses_every_form():
    found = find_references(
        ["@<a>", "@<b::/x/y>", "@<c::x?fallback>", "@<d::/x?>", "@<e::/>", "@<f::/x?a?b>"]
    )

    assert found == [
        Reference(name="a", path=None, fallback=None, has_fallback=False, text="@<a>"),
        Reference(name="b", path="/x/y", fallback=None, has_fallback=False, text="@<b::/x/y>"),
        Reference(
            name="c", path="x", fallback="fallback", has_fallback=True, text="@<c::x?fallback>"
        ),
        Reference(name="d", path="/x", fallback=None, has_fallback=True, text="@<d::/x?>"),
        Reference(name="e", path="/", fallback=None, has_fallback=False, text="@<e::/>"),
        Reference(name="f", path="/x", fallback="a?b", has_fallback=True, text="@<f::/x?a?b>"),
    ]


def test_find_references_walks_values_and_elements_but_not_keys():
    document = {
        "@<key>": "plain",
        "nested": {"list": ["x@<one>y", {"deep": "@<two::/p>"}], "n": 3, "b": True},
        "last": "@<three>@<four>",
    }

    names = [reference.name for reference in find_references(document)]

    assert names == ["one", "two", "three", "four"]


def test_find_references_of_non_json_scalars_is_empty():
    assert find_references(None) == []
    assert find_references(42) == []
    assert find_references("no references here") == []


def test_referenced_operation_names_strips_out_and_ignores_pop_names():
    document = {
        "a": "@<mediainfo.1.out::/mediaProperties/width>",
        "b": "--@<analysis.out>--@<pop.agendaId>--@<pop.payload::/x>",
        "c": ["@<encode.out.url>", "@<staticValue>", "@<outcome>"],
    }

    assert referenced_operation_names(document) == {"mediainfo.1", "analysis", "encode"}


def test_whole_reference_keeps_the_json_type_of_the_value():
    names = {"media.out": MEDIA, "count": 7, "ratio": 0.5, "nothing": None, "text": "hi"}
    document = {
        "object": "@<media.out::/mediaProperties>",
        "array": "@<media.out::/tags>",
        "number": "@<count>",
        "float": "@<ratio>",
        "null": "@<nothing>",
        "string": "@<text>",
        "whole": "@<media.out::/>",
    }

    assert resolve_references(document, names) == {
        "object": {"width": 1920, "height": 1080, "hdr": False},
        "array": ["a", "b"],
        "number": 7,
        "float": 0.5,
        "null": None,
        "string": "hi",
        "whole": MEDIA,
    }


def test_whole_reference_to_a_boolean_is_substituted_unlike_pop():
    names = {"media.out": MEDIA, "flag": True}

    resolved = resolve_references(["@<flag>", "@<media.out::/mediaProperties/hdr>"], names)

    assert resolved == [True, False]


def test_pointer_without_leading_slash_and_array_index_resolve():
    names = {"analysis.1.out": {"operations": [{"id": "op-7"}]}}

    resolved = resolve_references(
        ["@<analysis.1.out::operations/0/id>", "@<analysis.1.out::/operations/0/id>"], names
    )

    assert resolved == ["op-7", "op-7"]


def test_pointer_unescapes_tilde_and_slash():
    names = {"x": {"a/b": {"c~d": 1}}}

    assert resolve_references("@<x::/a~1b/c~0d>", names) == 1


def test_composite_string_inserts_scalars_as_text():
    names = {"sampleValue": 85, "sampleValue2": 95}

    assert resolve_references("--@<sampleValue>--@<sampleValue2>", names) == "--85--95"


def test_composite_string_renders_booleans_null_and_floats_as_json():
    names = {"t": True, "f": False, "n": None, "x": 1.5, "s": "str"}

    assert resolve_references("@<t>,@<f>,@<n>,@<x>,@<s>", names) == "true,false,null,1.5,str"


def test_composite_string_with_an_object_is_invalid():
    with pytest.raises(UnresolvedReferences) as raised:
        resolve_references("size: @<media.out::/mediaProperties>", {"media.out": MEDIA})

    assert raised.value.missing == []
    assert raised.value.invalid == ["media.out cannot be used in composite string"]
    assert str(raised.value) == (
        "Invalid references: media.out cannot be used in composite string."
    )


def test_missing_path_uses_the_string_fallback():
    names = {"media.out": MEDIA}

    resolved = resolve_references(
        ["@<media.out::/nope?default>", "@<media.out::/mediaProperties/width?0>"], names
    )

    assert resolved == ["default", 1920]


def test_missing_path_with_bare_question_mark_gives_null():
    assert resolve_references("@<media.out::/nope?>", {"media.out": MEDIA}) is None


def test_fallback_inside_a_composite_string_is_inserted_as_text():
    names = {"media.out": MEDIA}

    assert resolve_references("w=@<media.out::/w?auto>;n=@<media.out::/n?>", names) == (
        "w=auto;n=null"
    )


def test_missing_path_without_fallback_is_invalid():
    with pytest.raises(UnresolvedReferences) as raised:
        resolve_references({"w": "@<media.out::/mediaProperties/depth>"}, {"media.out": MEDIA})

    assert raised.value.missing == []
    assert raised.value.invalid == ["@<media.out::/mediaProperties/depth> (path not found)"]


def test_index_past_the_end_of_an_array_is_a_missing_path():
    with pytest.raises(UnresolvedReferences) as raised:
        resolve_references("@<media.out::/tags/2>", {"media.out": MEDIA})

    assert raised.value.invalid == ["@<media.out::/tags/2> (path not found)"]


def test_unknown_names_are_all_reported_once_each():
    with pytest.raises(UnresolvedReferences) as raised:
        resolve_references(["@<a>", "x@<b>y", {"k": "@<a::/z>"}], {"known": 1})

    assert raised.value.missing == ["a", "b"]
    assert raised.value.invalid == []
    assert str(raised.value) == "Unknown reference names: a, b."


def test_missing_and_invalid_are_reported_together():
    with pytest.raises(UnresolvedReferences) as raised:
        resolve_references(["@<a>", "@<known::/x>"], {"known": {}})

    assert raised.value.missing == ["a"]
    assert raised.value.invalid == ["@<known::/x> (path not found)"]
    assert str(raised.value) == (
        "Unknown reference names: a. Invalid references: @<known::/x> (path not found)."
    )


def test_leave_missing_keeps_unknown_references_as_written():
    names = {"known": 5}
    document = {"a": "@<unknown::/x>", "b": "@<known>-@<unknown>", "c": "@<known>"}

    resolved = resolve_references(document, names, leave_missing=True)

    assert resolved == {"a": "@<unknown::/x>", "b": "5-@<unknown>", "c": 5}


def test_leave_missing_still_raises_for_invalid_references():
    with pytest.raises(UnresolvedReferences) as raised:
        resolve_references(["@<unknown>", "@<known::/x>"], {"known": {}}, leave_missing=True)

    assert raised.value.missing == []
    assert raised.value.invalid == ["@<known::/x> (path not found)"]


def test_name_resolves_through_its_longest_dotted_prefix():
    names = {"op1.out": {"size": {"w": 3}}, "op1": "wrong"}

    resolved = resolve_references(["@<op1.out.size>", "@<op1.out.size::/w>"], names)

    assert resolved == [{"w": 3}, 3]


def test_exact_name_wins_over_a_dotted_prefix():
    names = {"a.b": "exact", "a": {"b": "through prefix"}}

    assert resolve_references("@<a.b>", names) == "exact"


def test_resolution_returns_a_new_structure_and_copies_inserted_values():
    document = {"list": ["@<media.out::/tags>"], "keep": [1, 2]}
    original = copy.deepcopy(document)
    names = {"media.out": copy.deepcopy(MEDIA)}

    resolved = resolve_references(document, names)
    resolved["list"][0].append("c")
    resolved["keep"].append(3)

    assert document == original
    assert names["media.out"] == MEDIA


def test_non_string_values_pass_through_unchanged():
    document = {"n": 1, "f": 2.5, "b": False, "none": None, "list": [1, [True]]}

    assert resolve_references(document, {}) == document


def test_two_references_in_one_string_are_not_taken_as_one_whole_reference():
    assert resolve_references("@<a>@<b>", {"a": 1, "b": "x"}) == "1x"


def test_expand_template_substitutes_payload_alias_and_static_parameters():
    template = {
        "operations": [
            {
                "name": "encode",
                "type": "ffmpeg",
                "payload": {
                    "input": "@<pop.payload::/url>",
                    "legacy": "@<pop.transformRequest::/url>",
                    "preset": "@<preset>",
                    "label": "@<preset::/name>-@<pop.payload::/id>",
                    "all": "@<pop.payload>",
                },
            }
        ],
        "params": {"flag": "@<pop.payload::/flag>"},
    }
    payload = {"url": "s3://in.mp4", "id": 12, "flag": True}

    body = expand_template(template, payload=payload, static_parameters={"preset": {"name": "hd"}})

    assert body == {
        "operations": [
            {
                "name": "encode",
                "type": "ffmpeg",
                "payload": {
                    "input": "s3://in.mp4",
                    "legacy": "s3://in.mp4",
                    "preset": {"name": "hd"},
                    "label": "hd-12",
                    "all": payload,
                },
            }
        ],
        "params": {"flag": True},
    }


def test_expand_template_leaves_worker_side_references_untouched():
    template = {
        "payload": {
            "width": "@<mediainfo.out::/width>",
            "path": "@<pop.payload::/dir>/@<split.out::/key>",
            "agenda": "@<pop.agendaId>",
            "operation": "name-@<pop.operationName>",
            "nested": "@<mediainfo.1.out.size>",
        }
    }

    body = expand_template(template, payload={"dir": "/tmp"}, static_parameters={})

    assert body == {
        "payload": {
            "width": "@<mediainfo.out::/width>",
            "path": "/tmp/@<split.out::/key>",
            "agenda": "@<pop.agendaId>",
            "operation": "name-@<pop.operationName>",
            "nested": "@<mediainfo.1.out.size>",
        }
    }


def test_expand_template_does_not_bind_an_operation_output_to_a_static_parameter_prefix():
    body = expand_template(
        {"x": "@<mediainfo.out>"}, payload=None, static_parameters={"mediainfo": {"out": 1}}
    )

    assert body == {"x": "@<mediainfo.out>"}


def test_expand_template_rejects_unknown_names():
    template = {"a": "@<pop.payload::/x>", "b": "@<sampleValue>", "c": "@<pop.unknown>"}

    with pytest.raises(UnresolvedReferences) as raised:
        expand_template(template, payload={"x": 1}, static_parameters={"other": 2})

    assert raised.value.missing == ["sampleValue", "pop.unknown"]
    assert raised.value.invalid == []


def test_expand_template_reports_a_missing_payload_path():
    with pytest.raises(UnresolvedReferences) as raised:
        expand_template({"a": "@<pop.payload::/x>"}, payload={}, static_parameters={})

    assert raised.value.invalid == ["@<pop.payload::/x> (path not found)"]


def test_expand_template_with_null_payload_gives_null():
    assert expand_template({"a": "@<pop.payload>"}, payload=None, static_parameters={}) == {
        "a": None
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="abc@<>:/?x. "),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_documents_without_known_names_come_back_equal_when_missing_is_left(document):
    assert resolve_references(document, {}, leave_missing=True) == document


@given(json_values)
def test_every_found_reference_text_matches_the_pattern_exactly(document):
    for reference in find_references(document):
        match = REFERENCE_PATTERN.fullmatch(reference.text)
        assert match is not None
        assert match.group("reference") == reference.name
