"""retained_graph: losses with autograd history are kept alive across steps.

What it detects: a loss that went through ``backward`` still referenced steps later
(``losses.append(loss)``, ``total += loss``), or allocated memory that grows every step.
Why it matters: each kept loss holds its step's autograd graph: memory climbs until an
out-of-memory error, and the collector has more to walk.
How to fix: keep numbers, not tensors: ``losses.append(loss.item())`` (once per N steps on
GPU) or ``loss.detach()``.
"""

from fastmon.advisor.types import CODE_CHANGE, Advice

ID = "retained_graph"
MIN_GROWTH_BYTES_PER_STEP = 64 * 1024
MIN_STEPS = 50


def check(window, facts):
    event = facts.event("retained_graph")
    growth = window.mem_growth_per_step
    if event is None and not (facts.accelerator and window.steps >= MIN_STEPS
                              and growth >= MIN_GROWTH_BYTES_PER_STEP):
        return None
    if event is not None:
        evidence = (f"a loss used in backward was still alive {event.get('steps', 'several')} steps later "
                    f"(kept at {event.get('location')})")
    else:
        evidence = f"allocated GPU memory grows {growth / 2**20:.2f} MiB per step"
    return Advice(
        ID, "A loss (and its autograd graph) is kept across steps", evidence, None, CODE_CHANGE,
        fix="losses.append(loss.detach())  # or loss.item() every N steps",
        why="each kept loss holds its step's graph alive: memory grows until OOM",
        location=event.get("location") if event else None,
    )
