"""torch.compile as the probe meets it: the guard every hook starts with, and dynamo's
own counters read as facts.

Dynamo traces whatever a hook does inside a compiled region: a call into C
(``threading.get_ident``) breaks the graph, and reading a value that changes every step
(the step number) becomes a guard that recompiles. So each hook that can run inside a
compiled region first asks ``is_compiling()``, which dynamo folds to a constant True
while tracing: the rest of the hook is never traced. Eager cost: ~80 ns a call.

Dynamo's counters (``torch._dynamo.utils.counters``) are read from the publisher's thread,
and only once the script itself has imported dynamo: the probe never imports it.
"""

from __future__ import annotations

import sys

from torch.compiler import is_compiling  # noqa: F401

REASONS_KEPT = 8  # distinct graph-break and recompile reasons sent in the fact


def dynamo_counters() -> dict | None:
    """Graphs, graph breaks and recompilations so far, with their reasons; None when
    dynamo has not been used in this process."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    counters = getattr(utils, "counters", None)
    if counters is None:
        return None
    stats = dict(counters.get("stats", {}))
    if not stats.get("unique_graphs"):
        return None
    breaks = dict(counters.get("graph_break", {}))
    recompiles = dict(counters.get("recompiles", {}))
    return {
        "graphs": int(stats.get("unique_graphs", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": [first_line(reason) for reason in list(breaks)[:REASONS_KEPT]],
        "recompiles": int(sum(recompiles.values())),
        "recompile_reasons": [first_line(reason) for reason in list(recompiles)[:REASONS_KEPT]],
        "compile_seconds": compile_seconds(utils),
    }


def compile_seconds(utils) -> float | None:
    """Seconds spent compiling so far, as dynamo times its own entry point."""
    metrics = getattr(utils, "compilation_time_metrics", None)
    if not isinstance(metrics, dict):
        return None
    times = metrics.get("_compile.compile_inner") or metrics.get("_compile.<locals>.compile_inner")
    if not times:
        return None
    return round(float(sum(times)), 3)


def graphs_so_far() -> int:
    """Graphs dynamo has compiled in this process: cheap enough for a timed step's end."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    try:
        return utils.counters["stats"]["unique_graphs"]
    except Exception:
        return 0


def first_line(reason: str) -> str:
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    text = " ".join(lines[:2])
    return text[:300]


class CompileWatch:
    """Marks the steps in which dynamo compiled (they are start-up, not training) and sends
    its counters as the ``compile`` fact. From a timed step's end (that step exactly) and
    from the publisher's round (the steps since its last round)."""

    def __init__(self, probe) -> None:
        self.probe = probe
        self.graphs = 0
        self.checked_step = 0  # the step in progress at the last look

    def at_step_end(self, step: int) -> None:
        """Timed step ``step`` has ended."""
        graphs = graphs_so_far()
        if graphs != self.graphs:
            self.graphs = graphs
            self.probe.event("compiled", from_step=step, to_step=step, graphs=graphs)
        self.checked_step = step + 1

    def at_round(self, step_in_progress: int) -> None:
        graphs = graphs_so_far()
        if graphs != self.graphs:
            self.graphs = graphs
            self.probe.event("compiled", from_step=min(self.checked_step, step_in_progress), to_step=step_in_progress,
                             graphs=graphs)
        self.checked_step = step_in_progress
        counters = dynamo_counters()
        if counters is not None:
            self.probe.fact("compile", counters)  # sent when it changed


class SteppedInGraph:
    """The optimizer whose step ran inside a compiled function. Set by the optimizer's post
    hook while dynamo traces it (an attribute store, which dynamo replays after the graph
    at every call); read and cleared by the compiled function's eager wrapper."""

    optimizer = None


STEPPED_IN_GRAPH = SteppedInGraph()
