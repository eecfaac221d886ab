"""Pure geometry and formatting behind the pages' inline SVG (no database)."""

from agendas.models import OperationProgress
from core.pages import duration_text
from core.svg_geometry import DAG_MAX_OPERATIONS, NODE_HEIGHT, dag_layout, share_chart, sparkline
from popsite.dashboard_selectors import CustomerShare


def rows(*names_and_states: tuple[str, str]) -> list[OperationProgress]:
    return [
        OperationProgress(name=name, type="log", state=state, percent_complete=50.0)
        for name, state in names_and_states
    ]


def test_duration_text_picks_two_units():
    assert [duration_text(value) for value in (None, 0, 59.9, 95, 3_700, 90_000)] == [
        "—",
        "0 s",
        "59 s",
        "1 min 35 s",
        "1 h 1 min",
        "1 d 1 h",
    ]


def test_sparkline_scales_to_the_peak_and_spans_the_width():
    spark = sparkline([0, 2, 4, 0])

    points = [tuple(map(float, pair.split(","))) for pair in spark["line"].split()]
    assert [x for x, _ in points] == [0.0, 120.0, 240.0, 360.0]
    assert points[2][1] == 4.0  # the peak touches the top margin
    assert points[0][1] == points[3][1] == 60.0  # zero sits on the baseline
    assert (spark["total"], spark["peak"], spark["last_value"]) == (6, 4, 0)


def test_sparkline_of_an_idle_hour_is_flat():
    spark = sparkline([0] * 60)

    assert {pair.split(",")[1] for pair in spark["line"].split()} == {"60"}
    assert spark["peak"] == 0


def test_share_chart_bars_scale_to_the_largest_and_name_hidden_customers_generically():
    chart = share_chart(
        [CustomerShare(label="acme", executing=3), CustomerShare(label="", executing=1)]
    )

    acme, other = chart["bars"]
    assert (acme.label, acme.percent, acme.width, acme.is_other) == ("acme", 75.0, 190.0, False)
    assert (other.label, other.percent, other.is_other) == ("other customers", 25.0, True)
    assert other.width == 190.0 / 3
    assert chart["total"] == 4


def test_dag_columns_follow_dependency_depth_and_implied_edges_are_dropped():
    operations = [
        {"name": "probe", "type": "log"},
        {"name": "hd", "type": "log", "payload": "@<probe.out>"},
        {"name": "sd", "type": "log", "payload": "@<probe.out>"},
        {"name": "pack", "type": "log", "depends_on": ["hd", "sd", "probe"]},
    ]

    dag = dag_layout(
        rows(("probe", "succeeded"), ("hd", "executing"), ("sd", "waiting"), ("pack", "waiting")),
        operations,
    )

    columns = {node.name: node.x for node in dag["nodes"]}
    assert columns["probe"] < columns["hd"] == columns["sd"] < columns["pack"]
    # probe → pack is implied by probe → hd → pack.
    assert len(dag["edges"]) == 4
    assert [edge.state for edge in dag["edges"]].count("succeeded") == 2
    assert [node.anchor for node in dag["nodes"]] == ["op-1", "op-2", "op-3", "op-4"]
    assert dag["nodes"][1].bar_width == 78.0


def test_dag_edge_skipping_a_column_with_a_node_in_its_way_runs_on_a_lane_below():
    operations = [
        {"name": "a", "type": "log"},
        {"name": "b", "type": "log", "depends_on": ["a"]},
        {"name": "c", "type": "log", "depends_on": ["b", "x"]},
        {"name": "x", "type": "log"},
    ]

    dag = dag_layout(
        rows(("a", "waiting"), ("b", "waiting"), ("c", "waiting"), ("x", "waiting")), operations
    )

    lane_paths = [edge.path for edge in dag["edges"] if " L" in edge.path]
    assert len(lane_paths) == 1  # x (column 0) → c (column 2) would cross b
    assert dag["height"] > 2 * NODE_HEIGHT


def test_dag_tolerates_a_cycle_and_refuses_huge_agendas():
    operations = [
        {"name": "a", "type": "log", "depends_on": ["b"]},
        {"name": "b", "type": "log", "depends_on": ["a"]},
    ]

    assert len(dag_layout(rows(("a", "waiting"), ("b", "waiting")), operations)["nodes"]) == 2
    many = rows(*((f"op{index}", "waiting") for index in range(DAG_MAX_OPERATIONS + 1)))
    assert dag_layout(many, []) is None
