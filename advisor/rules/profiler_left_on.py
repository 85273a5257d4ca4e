"""profiler.left_on: an autograd profiler (or emit_nvtx) is recording the training.

What it detects: the legacy autograd profiler / ``emit_nvtx`` / ``torch.profiler`` is
enabled while steps run.
Why it matters: every op is recorded; host overhead grows several times and memory grows
with the trace.
How to fix: profile a few steps (``torch.profiler.schedule``), not the whole run; remove
the ``with profile(...)`` around the training loop.
"""

from fastmon.advisor.types import CODE_CHANGE, Advice

ID = "profiler.left_on"


def check(window, facts):
    if not facts.settings.get("profiler_on"):
        return None
    return Advice(
        ID, "A profiler is recording every step",
        f"the autograd profiler is enabled at step {window.last_step}", None, CODE_CHANGE,
        fix="torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3))",
        why="recording every op slows the host and grows memory with the trace",
        location=(facts.values.get("profiler_created_at") or {}).get("location"),
    )
