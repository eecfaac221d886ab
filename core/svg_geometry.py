"""The geometry of the pages' inline SVG pictures, pure (rows in, coordinates out) so the
templates stay free of arithmetic: the overview's share bars and throughput sparkline, and an
agenda's operations as a DAG coloured by state. Rows are read by attribute only: share rows
need `label` and `executing`; operation rows `name`, `state`, `percent_complete`."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agenda_language.dependencies import operation_dependencies


@dataclass(frozen=True)
class ShareBar:
    label: str
    executing: int
    percent: float
    y: int
    width: float
    is_other: bool


SHARE_ROW = 24


SHARE_LABEL = 96


SHARE_BAR_MAX = 190


def share_chart(shares: Sequence[Any]) -> dict:
    """Horizontal bars, one per customer, scaled to the largest share."""
    total = sum(share.executing for share in shares)
    largest = max((share.executing for share in shares), default=0)
    bars = [
        ShareBar(
            label=share.label or "other customers",
            executing=share.executing,
            percent=100.0 * share.executing / total if total else 0.0,
            y=index * SHARE_ROW,
            width=max(2.0, SHARE_BAR_MAX * share.executing / largest) if largest else 0.0,
            is_other=not share.label,
        )
        for index, share in enumerate(shares)
    ]
    return {
        "bars": bars,
        "total": total,
        "height": max(SHARE_ROW, len(bars) * SHARE_ROW),
        "width": SHARE_LABEL + 8 + SHARE_BAR_MAX + 62,
        "label_width": SHARE_LABEL,
        "bar_x": SHARE_LABEL + 8,
        "bar_max": SHARE_BAR_MAX,
        "text_x": SHARE_LABEL + 8 + SHARE_BAR_MAX + 6,
    }


SPARK_WIDTH = 360


SPARK_HEIGHT = 64


def sparkline(values: list[int]) -> dict:
    """Polyline points (and a closed area) for per-minute counts, oldest on the left."""
    peak = max(values, default=0)
    count = len(values)
    step = SPARK_WIDTH / (count - 1) if count > 1 else 0
    usable = SPARK_HEIGHT - 8

    def y_of(value: int) -> float:
        return round(SPARK_HEIGHT - 4 - (usable * value / peak if peak else 0), 1)

    points = [(round(index * step, 1), y_of(value)) for index, value in enumerate(values)]
    line = " ".join(f"{x},{y}" for x, y in points)
    area = f"0,{SPARK_HEIGHT} {line} {SPARK_WIDTH},{SPARK_HEIGHT}" if points else ""
    last = points[-1] if points else (0, SPARK_HEIGHT)
    return {
        "width": SPARK_WIDTH,
        "height": SPARK_HEIGHT,
        "line": line,
        "area": area,
        "peak": peak,
        "total": sum(values),
        "last_value": values[-1] if values else 0,
        "last_x": last[0],
        "last_y": last[1],
        "minutes": count,
    }


DAG_MAX_OPERATIONS = 300


@dataclass(frozen=True)
class DagNode:
    name: str
    label: str
    state: str
    percent: float
    anchor: str
    x: int
    y: int
    bar_width: float


@dataclass(frozen=True)
class DagEdge:
    path: str
    state: str


NODE_WIDTH = 176


NODE_HEIGHT = 52


GAP_X = 56


GAP_Y = 16


PAD = 12


LABEL_CHARS = 20


LANE_GAP = 10


def _crosses_a_node(
    positions: dict[str, tuple[int, int]],
    depth: dict[str, int],
    source: str,
    target: str,
    start_y: float,
    end_y: float,
) -> bool:
    """Whether a direct curve from `source` to `target` would pass behind another node."""
    low, high = min(start_y, end_y) - 4, max(start_y, end_y) + 4
    between = range(depth[source] + 1, depth[target])
    return any(
        depth[name] in between and y < high and y + NODE_HEIGHT > low
        for name, (_, y) in positions.items()
    )


def _ancestors(parents: dict[str, list[str]]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}

    def visit(name: str, trail: frozenset[str]) -> set[str]:
        if name in found:
            return found[name]
        result: set[str] = set()
        for parent in parents.get(name, ()):
            if parent not in trail:
                result.add(parent)
                result |= visit(parent, trail | {name})
        found[name] = result
        return result

    for name in parents:
        visit(name, frozenset())
    return found


def dag_layout(rows: Sequence[Any], operations: Any) -> dict | None:
    """Columns by dependency depth, left to right; edges after transitive reduction."""
    if not rows or len(rows) > DAG_MAX_OPERATIONS:
        return None
    names = [row.name for row in rows]
    known = set(names)
    declared = operation_dependencies(operations) if isinstance(operations, list) else {}
    parents = {
        name: sorted(dep for dep in declared.get(name, ()) if dep in known and dep != name)
        for name in names
    }
    ancestors = _ancestors(parents)
    reduced = {
        name: [
            parent
            for parent in deps
            if not any(parent in ancestors.get(other, ()) for other in deps if other != parent)
        ]
        for name, deps in parents.items()
    }
    depth: dict[str, int] = {}

    def depth_of(name: str, trail: frozenset[str]) -> int:
        # `trail` guards against a cycle (submit rejects them; generated operations might not).
        if name not in depth:
            depth[name] = 1 + max(
                (
                    depth_of(parent, trail | {name})
                    for parent in parents[name]
                    if parent not in trail
                ),
                default=-1,
            )
        return depth[name]

    for name in names:
        depth_of(name, frozenset())
    columns: dict[int, list[Any]] = {}
    for row in rows:
        columns.setdefault(depth[row.name], []).append(row)
    tallest = max(len(column) for column in columns.values())
    row_step = NODE_HEIGHT + GAP_Y
    positions: dict[str, tuple[int, int]] = {}
    nodes = []
    for index, row in enumerate(rows, start=1):
        column = columns[depth[row.name]]
        slot = column.index(row)
        offset = (tallest - len(column)) * row_step // 2
        x = PAD + depth[row.name] * (NODE_WIDTH + GAP_X)
        y = PAD + offset + slot * row_step
        positions[row.name] = (x, y)
        label = row.name if len(row.name) <= LABEL_CHARS else row.name[: LABEL_CHARS - 1] + "…"
        nodes.append(
            DagNode(
                name=row.name,
                label=label,
                state=row.state,
                percent=round(row.percent_complete, 0),
                anchor=f"op-{index}",
                x=x,
                y=y,
                bar_width=round((NODE_WIDTH - 20) * min(100.0, row.percent_complete) / 100, 1),
            )
        )
    states = {row.name: row.state for row in rows}
    content_bottom = PAD + tallest * row_step - GAP_Y
    edges = []
    lanes = 0
    for name, deps in reduced.items():
        x2, y2 = positions[name]
        for parent in deps:
            x1, y1 = positions[parent]
            start_x, start_y = x1 + NODE_WIDTH, y1 + NODE_HEIGHT // 2
            end_x, end_y = x2 - 4, y2 + NODE_HEIGHT // 2
            if _crosses_a_node(positions, depth, parent, name, start_y, end_y):
                # Skip over the columns in between along a lane under the graph, so the line
                # never runs behind a node it does not belong to.
                lane = content_bottom + LANE_GAP * (lanes + 1)
                lanes += 1
                quarter = GAP_X / 4
                path = (
                    f"M{start_x} {start_y} C{start_x + quarter} {start_y} {start_x + quarter} "
                    f"{lane} {start_x + 2 * quarter} {lane} L{end_x - 2 * quarter} {lane} "
                    f"C{end_x - quarter} {lane} {end_x - quarter} {end_y} {end_x} {end_y}"
                )
            else:
                middle = (start_x + end_x) / 2
                path = f"M{start_x} {start_y} C{middle} {start_y} {middle} {end_y} {end_x} {end_y}"
            edges.append(DagEdge(path=path, state=states[parent]))
    width = PAD * 2 + (max(depth.values()) + 1) * (NODE_WIDTH + GAP_X) - GAP_X
    height = content_bottom + PAD + LANE_GAP * lanes
    return {
        "nodes": nodes,
        "edges": edges,
        "width": width,
        "height": height,
        "node_width": NODE_WIDTH,
        "node_height": NODE_HEIGHT,
    }
