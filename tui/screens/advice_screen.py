"""One piece of advice in full: evidence, why, how to fix, where, and what applying did."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from fastmon.advisor.types import gain_text
from fastmon.common.verdicts import result_text


def advice_markdown(a: dict, can_apply: bool) -> str:
    lines = [f"# {a['title']}", f"`{a['id']}` · {a.get('action', '').replace('_', '-')} · confidence {a.get('confidence')}"
             f" · status **{a.get('status', 'open')}**", "", f"**Evidence:** {a['evidence']}"]
    if a.get("est_gain") and not a.get("result"):
        lines.append(f"\n**Estimated gain:** {gain_text(a['est_gain'])} samples/s, the advisor's prediction "
                     "from the measured shares, tested when applied")
    if a.get("why"):
        lines.append(f"\n**Why it matters:** {a['why']}")
    if a.get("location"):
        lines.append(f"\n**Where:** `{a['location']}`")
    lines.append("\n**How to fix:**\n\n```python\n" + (a.get("fix") or "") + "\n```")
    result = a.get("result")
    if result:
        tried = ", ".join(f"{t['params']} → {t['samples_per_s']:,.1f}/s" for t in result.get("tried", []))
        lines.append(f"\n**Tried live from step {result['step']}:** {result['before_samples_per_s']:,.1f} → "
                     f"{result.get('after_samples_per_s') or 0:,.1f} samples/s: {result_text(result)}"
                     + (f" (tried {tried})" if tried else ""))
    keys = ["`a` apply live" if can_apply else None, "`d` dismiss", "`escape` close"]
    lines.append("\n" + " · ".join(k for k in keys if k))
    return "\n".join(lines)


class AdviceScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape,q", "dismiss(None)", "Close"), Binding("a", "choose('apply')", "Apply"),
                Binding("d", "choose('dismiss')", "Dismiss")]

    def __init__(self, advice: dict, can_apply: bool) -> None:
        super().__init__()
        self.advice = advice
        self.can_apply = can_apply

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="advice-box"):
            yield Markdown(advice_markdown(self.advice, self.can_apply))

    def action_choose(self, choice: str) -> None:
        if choice == "apply" and not self.can_apply:
            self.notify("This advice is a code change: see 'How to fix'.", severity="warning")
            return
        self.dismiss(choice)
