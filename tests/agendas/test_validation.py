import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenda_language.dependencies import (
    operation_dependencies,
    operations_to_reset,
    topological_order,
)
from agendas.validation import validate_operations


def op(name, type_="sample", **fields):
    return {"name": name, "type": type_, **fields}


# POP's worked example (docs/design.md §5.3 and §7.3): 2 references 1; 3 references 2 and depends
# on 1.
WORKED_EXAMPLE = [
    op("1", payload={"x": 1}),
    op("2", payload={"in": "@<1.out::/x>"}),
    op("3", payload={"in": "@<2.out>"}, depends_on=["1"]),
]


def test_valid_agenda_has_no_errors():
    operations = [
        op("probe", payload={"url": "s3://x"}, timeout_seconds=30, params={"k": "v"}),
        op(
            "encode",
            payload={"w": "@<probe.out::/width>", "id": "@<pop.agendaId>"},
            depends_on=["probe"],
        ),
        op("notify", "log"),
    ]

    assert validate_operations(operations) == {}


def test_worked_example_is_valid():
    assert validate_operations(WORKED_EXAMPLE) == {}


def test_operations_must_be_a_list():
    assert validate_operations({"name": "a"}) == {"operations": ["Must be a list of operations."]}
    assert validate_operations(None) == {"operations": ["Must be a list of operations."]}


def test_at_least_one_operation_is_required():
    assert validate_operations([]) == {"operations": ["At least one operation is required."]}


def test_at_most_1000_operations_are_allowed():
    operations = [op(f"op{number}") for number in range(1001)]

    assert validate_operations(operations) == {
        "operations": ["Ensure this list has no more than 1000 operations (it has 1001)."]
    }
    assert validate_operations(operations[:1000]) == {}


def test_each_operation_must_be_an_object():
    assert validate_operations([op("a"), "b", 3]) == {
        "operations.1": ["Must be an object."],
        "operations.2": ["Must be an object."],
    }


def test_name_is_required_non_empty_and_at_most_100_characters():
    operations = [
        {"type": "t"},
        op(""),
        op("   "),
        op(7),
        op("x" * 101),
        op("y" * 100),
    ]

    assert validate_operations(operations) == {
        "operations.0.name": ["This field is required."],
        "operations.1.name": ["Must be a non-empty string."],
        "operations.2.name": ["Must be a non-empty string."],
        "operations.3.name": ["Must be a non-empty string."],
        "operations.4.name": ["Ensure this field has no more than 100 characters."],
    }


def test_duplicate_names_are_reported_on_the_later_one_naming_the_first():
    operations = [op("Encode"), op("probe"), op("encode"), op("ENCODE")]

    assert validate_operations(operations) == {
        "operations.2.name": [
            "Operation name 'encode' is already used by operations.0.name "
            "(names are unique case-insensitively)."
        ],
        "operations.3.name": [
            "Operation name 'ENCODE' is already used by operations.0.name "
            "(names are unique case-insensitively)."
        ],
    }


def test_type_is_required_and_non_empty():
    operations = [{"name": "a"}, op("b", ""), op("c", None), op("d", ["x"])]

    assert validate_operations(operations) == {
        "operations.0.type": ["This field is required."],
        "operations.1.type": ["Must be a non-empty string."],
        "operations.2.type": ["This field is required."],
        "operations.3.type": ["Must be a non-empty string."],
    }


def test_unknown_fields_are_reported_on_the_operation():
    operations = [op("a", id="x", dependsOn=["b"]), op("b")]

    assert validate_operations(operations) == {
        "operations.0": ["Unknown fields: dependsOn, id."],
    }


def test_payload_may_be_any_json_value():
    operations = [op("a", payload=[1, 2]), op("b", payload="text"), op("c", payload=None)]

    assert validate_operations(operations) == {}


def test_timeout_must_be_a_positive_integer():
    operations = [
        op("a", timeout_seconds=0),
        op("b", timeout_seconds=-5),
        op("c", timeout_seconds=1.5),
        op("d", timeout_seconds="10"),
        op("e", timeout_seconds=True),
        op("f", timeout_seconds=1),
    ]

    assert validate_operations(operations) == {
        "operations.0.timeout_seconds": ["Must be a positive integer."],
        "operations.1.timeout_seconds": ["Must be a positive integer."],
        "operations.2.timeout_seconds": ["Must be a positive integer."],
        "operations.3.timeout_seconds": ["Must be a positive integer."],
        "operations.4.timeout_seconds": ["Must be a positive integer."],
    }


def test_params_must_be_an_object():
    assert validate_operations([op("a", params=["x"]), op("b", params={})]) == {
        "operations.0.params": ["Must be an object."]
    }


def test_depends_on_must_be_a_list_of_names():
    operations = [op("a", depends_on="b"), op("b", depends_on=["a", 3])]

    assert validate_operations(operations) == {
        "operations.0.depends_on": ["Must be a list of operation names."],
        "operations.1.depends_on": ["Must be a list of operation names."],
    }


def test_depends_on_must_name_operations_of_the_agenda():
    operations = [op("a", depends_on=["missing", "B", "other"]), op("b")]

    assert validate_operations(operations) == {
        "operations.0.depends_on": ["Unknown operation 'missing'.", "Unknown operation 'other'."],
    }


def test_an_operation_cannot_depend_on_itself():
    assert validate_operations([op("a", depends_on=["A"])]) == {
        "operations.0.depends_on": ["An operation cannot depend on itself."]
    }


def test_pop_params_depends_on_is_checked_like_depends_on():
    operations = [
        op("a", params={"dependsOn": "b, ghost"}),
        op("b", params={"dependsOn": ["b"]}),
    ]

    assert validate_operations(operations) == {
        "operations.0.params": ["dependsOn names unknown operation 'ghost'."],
        "operations.1.params": ["An operation cannot depend on itself."],
    }


def test_references_must_name_operations_of_the_agenda():
    operations = [
        op("a", payload={"x": "@<ghost.out::/x>", "y": "@<b.out>", "z": "@<B.out::/k>"}),
        op("b", params={"from": "--@<nobody.out>--"}),
    ]

    assert validate_operations(operations) == {
        "operations.0.payload": ["Reference @<ghost.out::/x> names no operation of this agenda."],
        "operations.1.params": ["Reference @<nobody.out> names no operation of this agenda."],
    }


def test_references_other_than_outputs_or_pop_names_are_rejected():
    operations = [op("a", payload={"x": "@<sampleValue>", "ok": "@<pop.operationName>"})]

    assert validate_operations(operations) == {
        "operations.0.payload": [
            "Reference @<sampleValue> must name an operation output (@<name.out…>) or pop.*."
        ]
    }


def test_an_operation_cannot_reference_its_own_output():
    assert validate_operations([op("a", payload="@<a.out>")]) == {
        "operations.0.payload": ["Reference @<a.out> is the operation's own output."]
    }


def test_a_cycle_through_depends_on_is_reported_once_naming_its_operations():
    operations = [op("a", depends_on=["b"]), op("b", depends_on=["a"]), op("c")]

    assert validate_operations(operations) == {
        "operations": ["Operations form a cycle: a -> b -> a"]
    }


def test_a_cycle_through_references_and_depends_on_is_reported():
    operations = [
        op("start"),
        op("a", payload={"in": "@<c.out>"}, depends_on=["start"]),
        op("b", depends_on=["a"]),
        op("c", payload="x-@<b.out::/id>-y"),
    ]

    assert validate_operations(operations) == {
        "operations": ["Operations form a cycle: a -> c -> b -> a"]
    }


def test_each_separate_cycle_is_reported():
    operations = [
        op("x", depends_on=["y"]),
        op("y", depends_on=["x"]),
        op("p", payload="@<q.out>"),
        op("q", payload="@<p.out>"),
    ]

    assert validate_operations(operations) == {
        "operations": [
            "Operations form a cycle: x -> y -> x",
            "Operations form a cycle: p -> q -> p",
        ]
    }


def test_a_cycle_in_a_long_chain_does_not_hit_the_recursion_limit():
    operations = [op("op0", depends_on=["op999"])]
    operations += [op(f"op{number}", depends_on=[f"op{number - 1}"]) for number in range(1, 1000)]

    errors = validate_operations(operations)

    assert list(errors) == ["operations"]
    message = errors["operations"][0]
    assert message.startswith("Operations form a cycle: op0 -> op999 -> op998 -> ")
    assert message.endswith(" -> op1 -> op0")


def test_every_problem_is_reported_at_once():
    operations = [
        op("a", "", depends_on=["zzz"], timeout_seconds=0, extra=1),
        op("A", payload="@<ghost.out>"),
        {"type": "t", "params": 5},
    ]

    assert validate_operations(operations) == {
        "operations.0": ["Unknown fields: extra."],
        "operations.0.type": ["Must be a non-empty string."],
        "operations.0.timeout_seconds": ["Must be a positive integer."],
        "operations.1.name": [
            "Operation name 'A' is already used by operations.0.name "
            "(names are unique case-insensitively)."
        ],
        "operations.2.name": ["This field is required."],
        "operations.2.params": ["Must be an object."],
        "operations.0.depends_on": ["Unknown operation 'zzz'."],
        "operations.1.payload": ["Reference @<ghost.out> names no operation of this agenda."],
    }


def test_operation_dependencies_joins_depends_on_references_and_pop_depends_on():
    operations = [
        op("probe"),
        op("split"),
        op("encode", payload={"a": "@<Probe.out::/w>"}, depends_on=["split"]),
        op("package", params={"dependsOn": "encode", "src": "@<split.out.key>"}),
    ]

    assert operation_dependencies(operations) == {
        "probe": set(),
        "split": set(),
        "encode": {"probe", "split"},
        "package": {"encode", "split"},
    }


def test_resetting_the_first_operation_of_the_worked_example_resets_all_three():
    assert operations_to_reset(WORKED_EXAMPLE, ["1"]) == {"1", "2", "3"}


def test_resetting_the_second_operation_of_the_worked_example_resets_two_and_three():
    assert operations_to_reset(WORKED_EXAMPLE, ["2"]) == {"2", "3"}


def test_resetting_the_last_operation_resets_only_it():
    assert operations_to_reset(WORKED_EXAMPLE, ["3"]) == {"3"}


def test_reset_follows_long_chains_and_leaves_independent_operations():
    operations = [
        op("a"),
        op("b", depends_on=["a"]),
        op("c", payload="@<b.out>"),
        op("d", params={"dependsOn": "c"}),
        op("lonely"),
    ]

    assert operations_to_reset(operations, ["A"]) == {"a", "b", "c", "d"}
    assert operations_to_reset(operations, []) == set()


def test_topological_order_puts_dependencies_first_and_keeps_given_order_among_ready():
    operations = [
        op("package", depends_on=["encode", "thumbs"]),
        op("probe"),
        op("encode", payload="@<probe.out>"),
        op("thumbs", depends_on=["probe"]),
        op("notify"),
    ]

    assert topological_order(operations) == ["probe", "encode", "thumbs", "package", "notify"]


def test_topological_order_of_a_cycle_raises_naming_it():
    with pytest.raises(ValueError, match=r"^Operations form a cycle: a -> b -> a$"):
        topological_order([op("a", depends_on=["b"]), op("b", depends_on=["a"])])


@st.composite
def acyclic_agendas(draw):
    count = draw(st.integers(min_value=1, max_value=12))
    operations = []
    for index in range(count):
        earlier = [f"op{number}" for number in range(index)]
        declared = draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else []
        referenced = draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else []
        payload = {name: f"@<{name}.out>" for name in referenced}
        operations.append(op(f"op{index}", payload=payload, depends_on=declared))
    order = draw(st.permutations(operations))
    return list(order)


@given(acyclic_agendas())
def test_agendas_whose_dependencies_point_backwards_are_valid_and_ordered(operations):
    assert validate_operations(operations) == {}
    order = topological_order(operations)
    dependencies = operation_dependencies(operations)

    assert sorted(order) == sorted(operation["name"] for operation in operations)
    for name, needs in dependencies.items():
        assert all(order.index(need) < order.index(name) for need in needs)


@given(acyclic_agendas(), st.data())
def test_reset_set_is_closed_under_dependants(operations, data):
    chosen = data.draw(st.lists(st.sampled_from([o["name"] for o in operations]), max_size=3))
    reset = operations_to_reset(operations, chosen)
    dependencies = operation_dependencies(operations)

    assert set(chosen) <= reset
    for name, needs in dependencies.items():
        if needs & reset:
            assert name in reset
