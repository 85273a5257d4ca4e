"""The run's verdict (issue, why, next) and what fastmon's changes are doing or did: the
experiment under way with its progress, at the end the fix with its measured gain and the
code that keeps it."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from fastmon.advisor.verdict import NOTHING
from fastmon.common.run_status import ENDED_STATUSES, RunStatus
from fastmon.common.verdicts import change_text, kept_faster, params_text, rates_text, result_text
from fastmon.tui.widgets.panel import Panel

QUIET_STEPS = 50  # the verdict shows from this many steps (fewer say little yet)


def experiment_line(exp: dict) -> Text:
    """"trying num_workers=4 (2 of 3): 12 of 16 steps, baseline 389 samples/s, now 1,020"."""
    text = Text("▶ ", style="bold yellow")
    text.append(f"trying {params_text(exp['params'])}", style="bold")
    if exp["candidates"] > 1:
        text.append(f" ({exp['candidate']} of {exp['candidates']})")
    if exp["state"] in ("applying", "finalizing"):
        text.append(": waiting for the training to take it at a step's end")
    elif exp["state"] == "reverting":
        text.append(": slower or no better, undoing it")
    elif exp.get("steps") or exp.get("method") != "epochs":
        text.append(f": {min(exp['steps'], exp['needed'])} of {exp['needed']} {exp.get('unit', 'steps')}")
    else:
        text.append(": measured over the second and third epoch starts from here")
    if exp.get("baseline"):
        text.append(f" · baseline {exp['baseline']:,.0f} samples/s")
    if exp.get("now"):
        text.append(f" · now {exp['now']:,.0f} samples/s", style="bold")
    return text


def fixed_lines(snap) -> list[Text]:
    """The changes measured faster, with their gain, and the code that keeps them; the
    others tried, as what they were; then the run before and after (what a short screen
    cuts first). A tick only beside a change measured faster."""
    faster = [a for a in snap.applied if kept_faster(a)]
    others = [a for a in snap.applied if a not in faster]
    if not faster and not others:
        return []
    lines = []
    for result in faster:
        line = Text("✔ fixed ", style="bold green")
        line.append(f"{params_text(result.get('params') or {})}: ", style="bold")
        line.append(f"{change_text(result)} ({rates_text(result)})")
        lines.append(line)
    for result in others:
        line = Text("· tried ", style="dim")
        line.append(f"{params_text(result.get('params') or {})}: {result_text(result)}", style="dim")
        lines.append(line)
    for code in (snap.outcome or {}).get("permanent") or []:
        line = Text("  keep it: ", style="bold")
        line.append(code, style="cyan")
        lines.append(line)
    ba = (snap.outcome or {}).get("before_after")
    if ba:
        before, after = ba["before"], ba["after"]
        lines.append(Text(f"  step {before['step_ms']['median']:,.1f} → {after['step_ms']['median']:,.1f} ms · "
                          f"data wait {before['phases']['data_wait']:.0%} → {after['phases']['data_wait']:.0%} "
                          f"of the step (steps {before['from_step']}-{before['to_step']} vs "
                          f"{after['from_step']}-{after['to_step']})", style="dim"))
    return lines


def verdict_line(snap) -> Text | None:
    """The verdict of the steps shown (``advisor.verdict``): issue, why, next; once the run
    has gone ``QUIET_STEPS`` steps, or has ended."""
    v = snap.verdict
    if v is None or (snap.steps < QUIET_STEPS and snap.status not in ENDED_STATUSES):
        return None
    settled = v.next == NOTHING
    text = Text("✔ " if settled else "● ", style="bold green" if settled else "bold yellow")
    text.append(v.issue, style="bold")
    text.append(f" — {v.why} — next: ")
    text.append(v.next + (" so far" if settled and snap.status == RunStatus.RUNNING else ""),
                style="bold green" if settled else "bold cyan")
    return text


class Outcome(Panel, Static):
    panel_id = "outcome"

    def signature(self, snap) -> object:
        return (snap.experiment, snap.outcome is not None, len(snap.applied), snap.steps // 50, snap.verdict)

    def show(self, snap) -> None:
        if snap.experiment:
            lines = [experiment_line(snap.experiment)]
        else:
            found = verdict_line(snap)
            lines = ([found] if found else []) + (fixed_lines(snap) if snap.outcome is not None else [])
        self.display = bool(lines)
        if lines:
            self.update(Text("\n").join(lines))
