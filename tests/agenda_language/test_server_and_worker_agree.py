"""The server and the worker read an agenda the same way: the operations each one waits for
(declared, in `params.dependsOn`, or referenced from the payload or the params) are the same
set whichever side computes them, and the worker waits for and resolves references in params."""

from hypothesis import given
from hypothesis import strategies as st

from agenda_language.dependencies import operation_dependencies
from agendas.validation import validate_operations
from popclient.dag import DagRunner
from popclient.handlers import default_registry
from popclient.operation_state import SUCCEEDED


def worker_dependencies(operations):
    runner = DagRunner({"id": "agenda-1", "operations": operations}, registry=default_registry())
    states = runner.operations()
    return {
        name: {dependency.lower() for dependency in state.depends_on}
        for name, state in states.items()
    }


def server_dependencies(operations):
    """What the server's rerun reset, cycle check and DAG page see."""
    return {
        name: {dependency.lower() for dependency in dependencies}
        for name, dependencies in operation_dependencies(operations).items()
    }


@st.composite
def valid_agendas(draw):
    """Agendas whose operations point back at earlier ones in all four ways, names in any case."""
    count = draw(st.integers(min_value=1, max_value=10))
    operations = []
    for index in range(count):
        earlier = [f"op{number}" for number in range(index)]

        def some(earlier=earlier):
            return draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else []

        def spelled(name):
            return name.upper() if draw(st.booleans()) else name

        operation = {"name": f"op{index}", "type": "echo"}
        declared, listed, in_payload, in_params = some(), some(), some(), some()
        if declared:
            operation["depends_on"] = [spelled(name) for name in declared]
        params = {}
        if listed:
            params["dependsOn"] = ", ".join(spelled(name) for name in listed)
        for name in in_params:
            params[f"from_{name}"] = f"size=@<{spelled(name)}.out::/size?0>"
        if params:
            operation["params"] = params
        operation["payload"] = {f"in_{name}": f"@<{name}.out>" for name in in_payload}
        operations.append(operation)
    return operations


@given(valid_agendas())
def test_server_and_worker_compute_the_same_dependency_graph(operations):
    assert validate_operations(operations) == {}

    assert worker_dependencies(operations) == server_dependencies(operations)


def test_a_reference_inside_params_alone_makes_the_worker_wait_and_is_resolved():
    seen = {}
    registry = default_registry()

    def probe(payload, ctx):
        return {"size": 42}

    def encode(payload, ctx):
        seen["params"] = ctx.operation["params"]
        return {}

    registry.register("probe", probe)
    registry.register("encode", encode)
    operations = [
        {"name": "encode", "type": "encode", "params": {"target": "w=@<probe.out::/size>"}},
        {"name": "probe", "type": "probe"},
    ]

    assert validate_operations(operations) == {}
    result = DagRunner({"id": "agenda-1", "operations": operations}, registry=registry).run()

    assert result.state == SUCCEEDED
    assert seen["params"] == {"target": "w=42"}
