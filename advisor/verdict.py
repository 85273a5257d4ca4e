"""The one verdict every surface shows (the live header and outcome line, the end screen,
the replay, the headless status line, the report and ``report --json``): *issue* (the
limit the steps press on, with its share), *why* (the evidence), *next* (the one thing to
do, or "nothing to change"). One function, given the same window's ``bound`` and the same
advice, so the surfaces cannot disagree."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fastmon.advisor.bound import COMMUNICATION, COMPUTE, DATA, LAUNCH, OUTSIDE, UNDERFILLED, GpuBusy, remedies
from fastmon.advisor.types import PROBLEM
from fastmon.common.verdicts import FASTER, OPEN, change_text, params_text

NOTHING = "nothing to change"
# what to do where no rule has a change to offer: the limit's own remedy
DATA_NEXT = "cheaper samples (cache decoded data, lighter transforms) or more cores for the loading"
COMM_NEXT = "overlap or shrink the communication (DDP's no_sync under gradient accumulation, larger buckets)"
OUTSIDE_NEXT = "see what runs between the steps: a profile of a few steps (the dashboard's t key, --profile-at STEP)"


@dataclass(frozen=True)
class Verdict:
    issue: str
    why: str
    next: str

    def as_dict(self) -> dict:
        return asdict(self)


def verdict(found: tuple[str, str] | None, shares: dict, advice: list[dict], applied: list[dict],
            gpu: GpuBusy | None = None, compiled: bool = False, straggler: int | None = None) -> Verdict | None:
    """``found``: ``bound``'s (limit, evidence) of the window; ``shares``: its phases'
    shares; ``advice``: the advisor's, each with its status; ``applied``: fastmon's changes
    (a limit that remains after one was kept is "still" there); ``gpu``: how busy the GPU
    was over the window; ``straggler``: the rank whose steps these are, where the other
    ranks wait for it. None without a limit."""
    if found is None:
        return None
    limit, why = found
    issue = {DATA: f"data-bound {shares.get('data_wait', 0.0):.0%}",
             OUTSIDE: f"other-bound {shares.get('other', 0.0):.0%}",
             COMMUNICATION: f"communication-bound {shares.get('comm', 0.0):.0%}",
             LAUNCH: f"launch-bound (GPU busy {gpu.util:.0f}%)" if gpu is not None else "launch-bound",
             UNDERFILLED: f"under-filled (SMs active {gpu.sm_active:.0f}%)" if gpu and gpu.sm_active is not None
             else "under-filled",
             }.get(limit, limit)
    if straggler is not None:
        issue, why = f"{issue} on rank {straggler}", of_straggler(straggler, why)
    if limit != COMPUTE and any(a.get("kept") for a in applied):
        issue = f"still {issue}"
    return Verdict(issue, why, next_step(limit, advice, compiled))


def of_straggler(rank: int, evidence: str) -> str:
    """Evidence read from the straggler's steps (the verdict's, its advice's), said so."""
    return f"rank {rank}, the straggler the other ranks wait for: {evidence}"


def next_step(limit: str, advice: list[dict], compiled: bool) -> str:
    """The open problem the advisor expects most of; else the limit's own remedy."""
    problems = [a for a in advice if a.get("kind", PROBLEM) == PROBLEM and a.get("status", OPEN) == OPEN]
    # measured faster as the run ended (a search it cut short): that setting, not the search
    # again; the live advice holds its trial's result, the report's what it measured
    measured = [(a, r) for a in problems if (r := a.get("result") or a.get("measured") or {}).get("verdict") == FASTER]
    if measured:
        best, result = max(measured, key=lambda pair: pair[1].get("speedup") or 1.0)
        return f"{best['title']}: {params_text(result.get('params') or {})}, measured {change_text(result)}"
    if problems:
        best = max(problems, key=lambda a: (a.get("est_gain") or 1.0, a["id"]))
        return f"{best['title']}: {best['fix']}" if best.get("fix") else best["title"]
    if limit == DATA:
        return DATA_NEXT
    if limit in (LAUNCH, UNDERFILLED):
        return remedies(limit, compiled)[0]
    if limit == COMMUNICATION:
        return COMM_NEXT
    if limit == OUTSIDE:
        return OUTSIDE_NEXT
    return NOTHING
