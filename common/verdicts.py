"""How a change of speed is judged — a change applied live, or one run against another —
and how the screens, the report and the trace word it. Imports nothing of fastmon's.

An advice's ``status`` is an AdviceStatus; its ``result`` is the experiment's, whose ``state`` is
an ExperimentState.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    """On a change of speed, from its interval: a change fastmon applied live
    (fastmon.experiments) and a change between two runs (fastmon.compare) are judged alike."""

    FASTER = "faster"
    SLOWER = "slower"
    NO_CHANGE = "no measurable change"
    NOT_MEASURED = "not measured"
    NOT_JUDGED = "not judged"  # the script replaced what the change was made to


class AdviceStatus(StrEnum):
    OPEN = "open"
    APPLYING = "applying"
    KEPT = "kept"  # measured faster, or no measurable change and harmless
    APPLIED = "applied"  # in effect; the run ended before it was measured
    TRIED = "tried"  # reverted or failed, its figure kept as the record
    DISMISSED = "dismissed"


class ExperimentState(StrEnum):
    """Where a live change (fastmon.experiments) stands; the last six are ends."""

    APPLYING = "applying"  # sent to the probe, not acknowledged yet
    MEASURING = "measuring"
    FINALIZING = "finalizing"  # settled on a candidate tried earlier: sent again
    REVERTING = "reverting"
    RETURNING = "returning"  # back to the original for a window: a check against the machine's drift
    KEPT = "kept"
    REVERTED = "reverted"
    REVERT_FAILED = "revert failed"
    FAILED = "failed"
    INCOMPLETE = "incomplete"  # the run ended first
    NOT_JUDGED = "not judged"  # the script replaced what it changed (a new DataLoader, say)


FASTER, SLOWER, NO_CHANGE, NOT_MEASURED, NOT_JUDGED = Verdict
OPEN, APPLYING, KEPT, APPLIED, TRIED, DISMISSED = STATUSES = tuple(AdviceStatus)
NOISE = 0.05  # a relative change of speed treated as noise, at the least
# ... and between two runs, where too few runs of the work measure it (fastmon compare):
# processes of one script on a shared CPU box differ in steady samples/s with nothing
# changed (examples/healthy.py on the 2-core CI VM, run after run on 2026-12-06: 18.7k,
# 17.8k, 17.1k, 16.3k, 15.3k, then 14.8k, 16.3k, 18.1k, 17.4k, 14.5k samples/s; -17% between
# two in a row). A live change is judged within one process (NOISE).
BETWEEN_RUNS_NOISE = 0.25
RUNS_THAT_MEASURE_NOISE = 3  # runs of one work whose spread is the noise between runs, at the least


def rate_error(walls: list[float], samples: list[int], blocks: int) -> float:
    """The standard error of samples/s over consecutive steps, relative to it, from the
    rates of ``blocks`` runs of steps: slow steps come in bursts (workers, checkpoints), so
    the spread of blocks, not of single steps, is the noise."""
    size = max(1, len(walls) // blocks)
    rates = []
    for i in range(0, len(walls) - size + 1, size):
        wall = sum(walls[i:i + size])
        rates.append(sum(samples[i:i + size]) / wall if wall > 0 else 0.0)
    mean = sum(rates) / len(rates) if rates else 0.0
    if len(rates) < 2 or mean <= 0:
        return 0.0
    variance = sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)
    return (variance / len(rates)) ** 0.5 / mean


def speed_interval(ratio: float, errors: tuple[float, ...], floor: float = NOISE) -> tuple[float, float, float]:
    """A ratio of two speeds and its ~95% interval from their relative errors, never
    narrower than ``floor`` either way."""
    half = max(floor, 2 * sum(e * e for e in errors) ** 0.5)
    return ratio, ratio * max(0.0, 1 - half), ratio * (1 + half)


def judge(interval: tuple[float, float, float] | None) -> str:
    if interval is None:
        return NOT_MEASURED
    _, low, high = interval
    return FASTER if low > 1 else SLOWER if high < 1 else NO_CHANGE


def keeps(verdict: str, changes_maths: bool) -> bool:
    """Whether a trial's change stays: measured faster, or no measurable change where it
    leaves the maths as they were (harmless, and the advice said why it should help)."""
    return verdict == FASTER or (verdict == NO_CHANGE and not changes_maths)


def advice_status(result: dict) -> str:
    if result.get("verdict") == NOT_JUDGED:  # nothing refuted: the change could not take
        return OPEN
    if result.get("verdict") == NOT_MEASURED:  # nothing refuted: still advice if it did not take effect
        return APPLIED if result.get("kept") else OPEN
    if result.get("state") == ExperimentState.INCOMPLETE and result.get("verdict") == FASTER:
        return OPEN  # measured faster, the run ended before it stayed: still the advice
    return KEPT if result.get("kept") else TRIED


def is_recommended(advice: dict) -> bool:
    """Still a recommendation: not refuted by its own experiment, not dismissed."""
    return advice.get("status", OPEN) not in (TRIED, DISMISSED)


def params_text(params: dict) -> str:
    """A change's parameters as code reads them: "num_workers=4"."""
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "on"


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


def rates_text(result: dict) -> str:
    """"1,234.5 → 2,345.6 samples/s": a change's before and after, live or between two runs (in
    tokens/s where compare judged two language-model runs by them)."""
    before, after = result.get("before_samples_per_s") or 0.0, result.get("after_samples_per_s")
    if result.get("after_tokens_per_s") is not None:  # compare's runs of a language model: judged on tokens
        return f"{result['before_tokens_per_s']:,.0f} → {result['after_tokens_per_s']:,.0f} tokens/s"
    if after is not None:
        return f"{before:,.1f} → {after:,.1f} samples/s"
    return f"{before:,.1f} samples/s before" if before else "nothing measured"


def result_text(result: dict) -> str:
    """The verdict in a few words, with the figures behind it."""
    if result.get("state") == ExperimentState.FAILED:
        return f"failed: {result.get('error')}"
    verdict = result.get("verdict")
    if verdict == NOT_JUDGED:
        return f"not judged: {result.get('error')}"
    if verdict == NOT_MEASURED:
        if result.get("method") == "interleaved" and result.get("error"):
            return f"not measured: {result['error']}"
        return ("applied, not measured before the run ended" if result.get("kept")
                else "not measured: the run ended before it took effect")
    change = change_text(result)
    if verdict == NO_CHANGE:
        return f"no measurable change ({change}) — " + ("kept: harmless" if result.get("kept") else "reverted")
    if result.get("state") == ExperimentState.INCOMPLETE and verdict in (FASTER, SLOWER):
        running = running_at_end(result)
        if running is not None:  # a search the run ended: the one it would settle on so far
            return f"{change}, the fastest measured; the run ended while {params_text(running)} was under trial"
        return f"{change}, measured; the run ended as it was being applied"
    return f"{change}, {'kept' if result.get('kept') else 'reverted'}"


def steps_text(blocks) -> str:
    """Runs of steps as the record numbers them: "10-29, 33-80"."""
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in blocks)


def search_text(result: dict) -> str:
    """The candidates a search measured, each against the same "before", and the one it
    was trying when the run ended: "searched (...): num_workers=2 1.92x, num_workers=4 3.40x"."""
    tried, before = result.get("tried") or [], result.get("before_samples_per_s")
    unmeasured = running_at_end(result) if tried else None
    if not before or not (len(tried) > 1 or unmeasured):
        return ""
    said = [f"{params_text(t['params'])} {t['samples_per_s'] / before:.2f}x" for t in tried if t.get("samples_per_s")]
    if unmeasured:
        said.append(f"{params_text(unmeasured)} running when the run ended, not measured")
    return f"searched (samples/s against the {before:,.1f} before): {', '.join(said)}"


def running_at_end(result: dict) -> dict | None:
    """The candidate a search the run ended was trying, not yet measured (older records:
    its params where the search's measured candidates had other ones)."""
    if "running_at_end" in result:
        return result["running_at_end"]
    tried = [t.get("params") for t in result.get("tried") or ()]
    unmeasured = result.get("state") == ExperimentState.INCOMPLETE and tried and result.get("params") not in tried
    return result.get("params") if unmeasured else None


def kept_faster(result: dict) -> bool:
    """A change that stayed in effect measured faster: fixed. Not one the run ended before
    its verdict stood (a search's fastest candidate so far did not stay); older records
    have no verdict: kept meant faster then."""
    if result.get("verdict") is None:
        return bool(result.get("kept"))
    return bool(result.get("kept")) and result["verdict"] == FASTER and result.get("state") != ExperimentState.INCOMPLETE


def measured_text(result: dict) -> str:
    """How a change was measured, in terms a user checks against the record: the steps
    of each side, and the worker start-ups a side accounts."""
    before, after = result.get("before") or {}, result.get("after") or {}
    if not before.get("blocks") or not after.get("blocks"):
        return ""
    if result.get("method") == "interleaved":
        pairs = result.get("pairs") or 0
        text = (f"measured interleaved: {pairs} pair{'s' if pairs != 1 else ''} of blocks, "
                f"{after['steps']} steps with it, {before['steps']} without")
    elif result.get("method") == "epochs" and before.get("startup_s"):
        # one set of steps, two ways: the "before" is built, and says from what
        text = (f"measured over whole epochs: steps {steps_text(after['blocks'])} as they ran (after), and the same "
                f"steps with their epoch starts waiting {before['startup_s']:.2f} s in all, as restarts of the "
                f"workers took before the change (before)")
    else:
        text = f"measured over steps {steps_text(before['blocks'])} (before) and {steps_text(after['blocks'])} (after)"
        start_ups = [f"{side} {w['startup_s']:.2f} s" for side, w in (("before", before), ("after", after))
                     if w.get("startup_s")]
        if start_ups:
            text += "; worker start-ups accounted: " + ", ".join(start_ups)
    if result.get("predicted"):
        text += f"; estimated {result['predicted']:.2f}x before it"
        if len(result.get("tried") or ()) > 1:
            text += " (for the first candidate)"
    return text

