"""Resolution as the worker sees it: a Resolution naming what is missing or invalid instead of
an exception (docs/design.md §5.3)."""

from agenda_language.pointers import resolve_pointer
from agenda_language.references import find_references, referenced_operations
from agenda_language.references import resolve as resolve_in

CONTEXT = {
    "probe.1.out": {
        "width": 1920,
        "ratio": 1.5,
        "hdr": False,
        "interlaced": True,
        "codec": "h264",
        "tags": ["a", "b"],
        "meta": {"x/y": 1, "t~z": 2},
        "nothing": None,
    },
    "pop.agendaId": "agenda-1",
    "pop.operationName": "encode",
}


def resolve(value):
    return resolve_in(value, CONTEXT)


def test_whole_value_keeps_json_type_including_booleans():
    resolution = resolve(
        {
            "w": "@<probe.1.out::/width>",
            "r": "@<probe.1.out::/ratio>",
            "hdr": "@<probe.1.out::/hdr>",
            "i": "@<probe.1.out::/interlaced>",
            "tags": "@<probe.1.out::/tags>",
            "none": "@<probe.1.out::/nothing>",
            "all": "@<probe.1.out>",
        }
    )

    assert resolution.ok
    assert resolution.value["w"] == 1920
    assert resolution.value["r"] == 1.5
    assert resolution.value["hdr"] is False
    assert resolution.value["i"] is True
    assert resolution.value["tags"] == ["a", "b"]
    assert resolution.value["none"] is None
    assert resolution.value["all"] == CONTEXT["probe.1.out"]


def test_pointer_without_leading_slash_and_root_slash():
    assert resolve("@<probe.1.out::width>").value == 1920
    assert resolve("@<probe.1.out::/>").value == CONTEXT["probe.1.out"]
    assert resolve("@<probe.1.out::/tags/1>").value == "b"


def test_pointer_escapes():
    assert resolve("@<probe.1.out::/meta/x~1y>").value == 1
    assert resolve("@<probe.1.out::/meta/t~0z>").value == 2


def test_composite_string_inserts_scalars_as_text():
    resolution = resolve("--@<probe.1.out::/width>--@<probe.1.out::/codec>--@<pop.agendaId>")
    assert resolution.value == "--1920--h264--agenda-1"
    assert resolve("hdr=@<probe.1.out::/hdr>").value == "hdr=false"
    assert resolve("x@<probe.1.out::/nothing>").value == "xnull"


def test_composite_string_rejects_objects_and_arrays():
    resolution = resolve("tags: @<probe.1.out::/tags>")
    assert resolution.invalid == ["probe.1.out cannot be used in composite string"]
    assert not resolution.ok


def test_fallback_used_only_when_path_is_missing():
    assert resolve("@<probe.1.out::/height?720>").value == "720"
    assert resolve("@<probe.1.out::/height?>").value is None
    assert resolve("@<probe.1.out::/width?720>").value == 1920
    assert resolve("h=@<probe.1.out::/height?auto>").value == "h=auto"


def test_missing_path_without_fallback_is_invalid():
    resolution = resolve({"h": "@<probe.1.out::/height>"})
    assert resolution.invalid and "/height" in resolution.invalid[0]
    assert resolution.value == {"h": "@<probe.1.out::/height>"}


def test_unknown_name_is_left_untouched_and_reported_missing():
    resolution = resolve(["@<later.out::/x>", "a @<later.out> b"])
    assert resolution.value == ["@<later.out::/x>", "a @<later.out> b"]
    assert resolution.missing == ["later.out"]
    assert resolution.invalid == []


def test_pop_tokens():
    assert resolve("@<pop.operationName>").value == "encode"
    assert resolve({"id": "@<pop.agendaId>"}).value == {"id": "agenda-1"}


def test_keys_are_not_substituted_and_input_is_not_modified():
    document = {"@<pop.agendaId>": ["@<pop.agendaId>", 3, True, None]}
    resolution = resolve(document)
    assert resolution.value == {"@<pop.agendaId>": ["agenda-1", 3, True, None]}
    assert document == {"@<pop.agendaId>": ["@<pop.agendaId>", 3, True, None]}


def test_find_references_and_referenced_operations():
    payload = {
        "a": "@<mediainfo.1.out::/mediaProperties/width>",
        "b": ["x@<analysis.out::/operations/0/id>y", "@<pop.agendaId>"],
    }
    names = [reference.name for reference in find_references(payload)]
    assert names == ["mediainfo.1.out", "analysis.out", "pop.agendaId"]
    assert referenced_operations(payload) == ["mediainfo.1", "analysis"]
    reference = find_references("@<a.out::/x/y?fb>")[0]
    assert (reference.operation, reference.pointer, reference.fallback) == ("a", "/x/y", "fb")


def test_resolve_pointer_errors():
    for document, pointer in [({"a": 1}, "/b"), ([1, 2], "/2"), ([1], "/01"), (3, "/x")]:
        try:
            resolve_pointer(document, pointer)
        except KeyError:
            continue
        raise AssertionError(f"{pointer} should not resolve in {document}")
