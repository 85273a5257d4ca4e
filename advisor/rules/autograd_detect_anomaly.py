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
# forward+backward without it: its cost is per autograd op, not per FLOP (a stack trace in
# forward, a NaN check in backward), so small ops lose most: 3.6x on the planted MLP,
# ~3x on examples/mistakes.py's conv net (benchmarks/results/advice_quality.md)
EXPECTED_SPEEDUP = 3.0


def check(window, facts):
    if not facts.settings.get("anomaly_detection"):
        return None
    share = window.share("forward") + window.share("backward")
    return Advice(
        ID, "Turn off autograd anomaly detection",
        f"anomaly detection is on; forward+backward are {share:.0%} of the step",
        round(amdahl(share, EXPECTED_SPEEDUP), 2), HOT_APPLY,
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
