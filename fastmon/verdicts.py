"""What a hot-apply experiment found, as the screens, the report and the trace word it,
and what it makes of the advice it tested. Imports nothing of fastmon's.

An advice's ``status`` is one of the STATUS values; its ``result`` is the experiment's.
"""

from __future__ import annotations

# An experiment's verdict, from its interval (fastmon.experiments).
FASTER, SLOWER, NO_CHANGE, NOT_MEASURED = "faster", "slower", "no measurable change", "not measured"
OPEN, APPLYING, KEPT, APPLIED, TRIED, DISMISSED = STATUSES = ("open", "applying", "kept", "applied", "tried",
                                                                "dismissed")
# kept: measured faster, or no measurable change and harmless; applied: in effect, the run
# ended before it was measured; tried: reverted or failed, its figure kept as the record.


def advice_status(result: dict) -> str:
    if result.get("verdict") == NOT_MEASURED:  # nothing refuted: still advice if it did not take effect
        return APPLIED if result.get("kept") else OPEN
    return KEPT if result.get("kept") else TRIED


def is_recommended(advice: dict) -> bool:
    """Still a recommendation: not refuted by its own experiment, not dismissed."""
    return advice.get("status", OPEN) not in (TRIED, DISMISSED)


def change_text(result: dict) -> str:
    """The measured change with its interval: "+12% samples/s [+5%, +19%]"."""
    speedup, interval = result.get("speedup"), result.get("speedup_interval")
    if not speedup:
        return "not measured"
    if speedup >= 1.5:
        text = f"{speedup:.1f}x samples/s"
        return text + (f" [{interval[0]:.1f}x, {interval[1]:.1f}x]" if interval else "")
    text = f"{(speedup - 1) * 100:+.0f}% samples/s"
    return text + (f" [{(interval[0] - 1) * 100:+.0f}%, {(interval[1] - 1) * 100:+.0f}%]" if interval else "")


def result_text(result: dict) -> str:
    """The verdict in a few words, with the figures behind it."""
    if result.get("state") == "failed":
        return f"failed: {result.get('error')}"
    verdict = result.get("verdict")
    if verdict == NOT_MEASURED:
        return ("applied, not measured before the run ended" if result.get("kept")
                else "not measured: the run ended before it took effect")
    change = change_text(result)
    if verdict == NO_CHANGE:
        return f"no measurable change ({change}) — " + ("kept: harmless" if result.get("kept") else "reverted")
    return f"{change}, {'kept' if result.get('kept') else 'reverted'}"
