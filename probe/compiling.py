"""torch.compile as the probe meets it: the guard every hook starts with, and dynamo's
own counters read as facts.

Dynamo traces whatever a hook does inside a compiled region: a call into C
(``threading.get_ident``) breaks the graph, and reading a value that changes every step
(the step number) becomes a guard that recompiles. So each hook that can run inside a
compiled region first asks ``is_compiling()``, which dynamo folds to a constant True
while tracing: the rest of the hook is never traced. Eager cost: ~80 ns a call.

Dynamo's counters (``torch._dynamo.utils.counters``) are read from the publisher's thread,
and only once the script itself has imported dynamo: the probe never imports it.
Recompilations are counted from dynamo's record of each compilation
(``get_compilation_metrics()``: the last 64, each with its compile id "frame/attempt" and
its recompile reason), which every release fills; its ``counters["recompiles"]`` is
empty on torch 2.13 (a loop that recompiled five times read 0).
"""

from __future__ import annotations

import re
import sys

from torch.compiler import is_compiling  # noqa: F401

from fastmon.probe.location import fmt, is_user_file

REASONS_KEPT = 8  # distinct graph-break and recompile reasons sent in the fact


class Recompiles:
    """Dynamo's recompilations so far, counted from its record of compilations as they
    come (it keeps the last 64): each one's reason and the code it recompiled."""

    def __init__(self) -> None:
        self.count = 0
        self.reasons: list[str] = []  # the latest REASONS_KEPT distinct ones
        self.where: str | None = None  # the code recompiled last: file:line
        self._last = None  # the newest compilation seen
        self._counted: set[str] = set()  # the compile ids counted

    def update(self, utils) -> None:
        getter = getattr(utils, "get_compilation_metrics", None)
        if getter is None:
            return
        metrics = getter()
        seen = next((i for i in range(len(metrics) - 1, -1, -1) if metrics[i] is self._last), None)
        new = metrics if seen is None else metrics[seen + 1:]
        if new:
            self._last = new[-1]
        for compilation in new:
            compile_id = str(getattr(compilation, "compile_id", "") or id(compilation))
            if not is_recompilation(compilation) or compile_id in self._counted:
                continue  # (torch 2.4 records some compilations twice, under one id)
            self._counted.add(compile_id)
            self.count += 1
            text = getattr(compilation, "recompile_reason", None) or "a guard failed (this torch does not record which)"
            reason, line = guard_text(text)
            if reason not in self.reasons:
                self.reasons = (self.reasons + [reason])[-REASONS_KEPT:]
            self.where = recompiled_at(text, getattr(compilation, "co_filename", None), line,
                                       getattr(compilation, "co_firstlineno", None)) or self.where


def recompiled_at(reason: str, filename: str | None, line: int | None, first_line_of_code: int | None) -> str | None:
    """The user's line a recompilation is of: the code dynamo recompiled where it is the
    user's, else the guarded source the reason names (``# <file>:14 in f``) where that is;
    None where both are torch's (a compiled module's frame is dynamo's ``external_utils``:
    the advice then points at the user's torch.compile call)."""
    if filename and is_user_file(filename):
        return fmt((filename, line or first_line_of_code))
    for source, number in re.findall(r"#\s*(\S+?):(\d+) in ", first_line(reason).split("\n")[0]):
        if is_user_file(source):
            return fmt((source, int(number)))
    return None


def guard_text(reason: str) -> tuple[str, int | None]:
    """Dynamo's recompile reason ("0/4: mode == 'e'  # <source>  # <file>:14 in f") as the
    guard that failed and the line it guards: ("mode == 'e'", 14)."""
    first = first_line(reason).split("\n")[0]
    guard, *comments = first.split("#")
    guard = guard.split(": ", 1)[1] if re.match(r"^\d+/\d+: ", guard) else guard
    line = next((int(m.group(1)) for c in comments if (m := re.search(r":(\d+) in ", c))), None)
    return " ".join(guard.split()), line


def is_recompilation(compilation) -> bool:
    """A compilation of code compiled before: its reason is set (2.5+), or its compile id's
    attempt ("frame/attempt") is past the first."""
    if getattr(compilation, "recompile_reason", None):
        return True
    compile_id = str(getattr(compilation, "compile_id", "") or "")
    attempt = compile_id.split("/")[1] if "/" in compile_id else ""
    return attempt.split("_")[0].isdigit() and int(attempt.split("_")[0]) > 0


def dynamo_counters(recompiles: Recompiles | None = None) -> dict | None:
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
    counted = dict(counters.get("recompiles", {}))  # filled by some releases, not by 2.13
    recompiles = recompiles or Recompiles()
    recompiles.update(utils)
    reasons = recompiles.reasons or [first_line(reason) for reason in list(counted)[:REASONS_KEPT]]
    return {
        "graphs": int(stats.get("unique_graphs", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": [first_line(reason) for reason in list(breaks)[:REASONS_KEPT]],
        "recompiles": max(recompiles.count, int(sum(counted.values()))),
        "recompile_reasons": reasons,
        "recompiled_at": recompiles.where,
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
        self.recompiles = Recompiles()

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
        counters = dynamo_counters(self.recompiles)
        if counters is not None:
            self.probe.fact("compile", counters)  # sent when it changed


class SteppedInGraph:
    """The optimizer whose step ran inside a compiled function. Set by the optimizer's post
    hook while dynamo traces it (an attribute store, which dynamo replays after the graph
    at every call); read and cleared by the compiled function's eager wrapper."""

    optimizer = None


STEPPED_IN_GRAPH = SteppedInGraph()
