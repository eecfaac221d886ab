"""Where the CPU of a throughput run over HTTP went (bench.over_http): per terminal agenda, by
process kind, with the cores' busy share and the rate the cores allow at that cost."""

from __future__ import annotations

import os
from dataclasses import dataclass

from bench.common import PhaseResult, say


@dataclass(frozen=True)
class CpuPerAgenda:
    """One run's CPU per terminal agenda: in all, and by process kind (largest first)."""

    terminal: int
    total_ms: float
    kinds_ms: dict[str, float]
    busy: float  # the share of the machine's cores the processes kept busy over the run

    @classmethod
    def of(cls, figures: dict) -> CpuPerAgenda:
        terminal = max(figures.get("terminal", 0), 1)
        total = sum(figures["cpu"].values())
        return cls(
            terminal=terminal,
            total_ms=total / terminal * 1000,
            kinds_ms={
                name: seconds / terminal * 1000
                for name, seconds in sorted(figures["cpu"].items(), key=lambda item: -item[1])
            },
            busy=total / ((os.cpu_count() or 1) * figures["cpu_wall"]),
        )

    def by_kind(self) -> str:
        return ", ".join(f"{name} {ms:.2f}" for name, ms in self.kinds_ms.items())


def record_costs(result: PhaseResult, figures: dict) -> CpuPerAgenda:
    """CPU ms per terminal agenda by process kind, the rate the machine's cores allow, and the
    connections and WAL bytes per agenda."""
    cpu = CpuPerAgenda.of(figures)
    terminal, cores = cpu.terminal, os.cpu_count() or 1
    for name, ms in cpu.kinds_ms.items():
        result.add(f"CPU per agenda: {name}", ms, "ms")
        if name == "postgresql":
            result.add(
                "database connections opened per agenda",
                figures["sessions"] / terminal,
                "conn",
                note=f"{figures['sessions']} in the run",
            )
    result.add(
        "WAL written per agenda",
        figures["wal"] / terminal,
        "bytes",
        note="the whole server's, the autovacuum stand-in's included",
    )
    result.add(
        "shared buffers touched per agenda",
        figures["buffers"] / terminal,
        "pages",
        note="pg_stat_database: every backend's, the autovacuum stand-in's included",
    )
    allowed = cores / cpu.total_ms * 1000
    result.add(
        "CPU per agenda: all processes",
        cpu.total_ms,
        "ms",
        note=f"cores busy {cpu.busy:.0%} over the run",
    )
    result.add(
        "agendas/s the cores allow at that CPU cost",
        allowed,
        "agendas/s",
        note=f"{cores} cores / CPU per agenda",
    )
    say(
        f"  http CPU ms per agenda: {cpu.by_kind()}; all {cpu.total_ms:.2f} "
        f"(cores busy {cpu.busy:.0%}: at most {allowed:.0f} agendas/s)"
    )
    return cpu


def record_short_queue_cost(
    result: PhaseResult, figures: dict, deep: CpuPerAgenda, queue_size: int, deep_size: int
) -> None:
    """The CPU per agenda of the run at `queue_size`, against the run at `deep_size` (`deep`),
    each process kind and the cores' busy share in the note."""
    cpu = CpuPerAgenda.of(figures)
    result.add(
        f"CPU per agenda, queue_size {queue_size}: all processes",
        cpu.total_ms,
        "ms",
        ratio=cpu.total_ms / deep.total_ms,
        reference=f"the run at queue_size {deep_size}",
        note=f"{cpu.by_kind()}; cores busy {cpu.busy:.0%}",
    )
