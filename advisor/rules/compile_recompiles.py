"""compile_recompiles: torch.compile compiles the model again and again.

What it detects: dynamo reported several recompilations (its own counters, read by the
probe): a guard fails at each new input shape or each new value of a Python number the
compiled code reads.
Why it matters: each recompilation takes seconds; past ``torch._dynamo.config.cache_size_limit``
(8) the function runs eagerly for good, without the speed compiling was for.
How to fix: ``torch.compile(model, dynamic=True)`` or ``torch._dynamo.mark_dynamic(x, dim)``
for varying shapes; a Python value that changes every step (a counter, a float learning
rate) read inside the compiled code passed as a tensor, or read outside it.
"""

from fastmon.advisor.types import CODE_CHANGE, Advice

ID = "compile_recompiles"
MIN_RECOMPILES = 3


def check(window, facts):
    compiled = facts.values.get("compile") or {}
    recompiles = compiled.get("recompiles") or 0
    if recompiles < MIN_RECOMPILES:
        return None
    reasons = compiled.get("recompile_reasons") or []
    called = facts.event("compile_called") or {}
    return Advice(
        ID, "torch.compile keeps recompiling",
        f"{recompiles} recompilations, {compiled.get('graphs', 0)} graphs"
        + (f"; {reasons[-1]}" if reasons else ""),
        None, CODE_CHANGE,
        fix="torch.compile(model, dynamic=True), or torch._dynamo.mark_dynamic(x, dim) on the varying dimension; "
            "a Python number that changes each step, read in the compiled code: pass it as a tensor",
        why="each recompilation costs seconds, and past the cache limit (8) the code runs uncompiled",
        location=compiled.get("recompiled_at") or called.get("location"), confidence="high",
    )
