"""autograd.detect_anomaly: anomaly detection is left on during training.

What it detects: ``torch.autograd.set_detect_anomaly(True)`` (or the context manager)
active while steps run.
Why it matters: every backward op records a Python stack trace in forward and checks for
NaNs in backward: backward is several times slower.
How to fix: remove ``set_detect_anomaly(True)`` / ``detect_anomaly()`` once the NaN is
found. fastmon switches it off live (it does not change the results).
"""

from fastmon.advisor.types import HOT_APPLY, REPLACE_CALL, Advice, Apply, Permanent, amdahl

ID = "autograd.detect_anomaly"
# Without the probe's measure of the stacks (a record from before it): forward+backward
# this much faster; its cost is per autograd op, not per FLOP, so it varies by model.
EXPECTED_SPEEDUP = 3.0
# The forward side, from the stacks' measured time: each node's metadata beside its stack
# makes the saving 1.17x the stacks' time on both the planted MLP and mistakes.py's conv net.
NODE_OVER_STACK = 1.15
# The backward side, a NaN check of every gradient: 2.6-2.8x faster without, on both.
BACKWARD_SPEEDUP = 2.6


def check(window, facts):
    if not facts.settings.get("anomaly_detection"):
        return None
    share = window.share("forward") + window.share("backward")
    measured = facts.values.get("anomaly_cost")
    if measured and window.steps and window.wall > 0:
        stacks = measured["stack_ms_a_step"] / 1e3 / (window.wall / window.steps)
        saved = min(stacks * NODE_OVER_STACK, share) + window.share("backward") * (1 - 1 / BACKWARD_SPEEDUP)
        estimate = 1 / (1 - min(saved, 0.95))
        evidence = (f"anomaly detection is on: it stores the Python stack of {measured['nodes_a_step']} autograd ops "
                    f"a step ({measured['stack_ms_a_step']:.2f} ms, {stacks:.0%} of the step) and checks every "
                    f"gradient for NaN in backward ({window.share('backward'):.0%})")
    else:
        estimate = amdahl(share, EXPECTED_SPEEDUP)
        evidence = f"anomaly detection is on; forward+backward are {share:.0%} of the step"
    return Advice(
        ID, "Turn off autograd anomaly detection", evidence, round(estimate, 2), HOT_APPLY,
        fix="delete torch.autograd.set_detect_anomaly(True) / with torch.autograd.detect_anomaly():",
        why="it records a stack trace per op in forward and checks every gradient for NaN",
        location=(facts.values.get("anomaly_detection_at") or {}).get("location"),
        apply=Apply("anomaly_detection", {"value": False}),
    )


def permanent(params: dict, facts) -> Permanent:
    """The code that keeps this change after fastmon (the report's "make it permanent"):
    ``set_detect_anomaly(False)`` also works as a context manager, in place of
    ``detect_anomaly()`` in a ``with``."""
    return Permanent("torch.autograd.set_detect_anomaly(False)", REPLACE_CALL,
                     calls=("set_detect_anomaly", "detect_anomaly"))
