"""The live advice: title, evidence in numbers, estimated gain and status, best first."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from fastmon.advisor.types import SUGGESTION, gain_text
from fastmon.common.verdicts import APPLYING, KEPT, OPEN, is_recommended, result_text
from fastmon.tui.widgets.panel import Panel


def advice_line(a: dict, offer_apply: bool = True) -> Text:
    """Once tried, the measured result replaces the estimate; a suggestion says so. A
    replay offers no apply."""
    text = Text()
    status = a.get("status", OPEN)
    gain = a.get("est_gain") if is_recommended(a) and not a.get("result") else None
    if a.get("kind") == SUGGESTION:
        text.append("suggest.  ", style="italic")
    else:
        text.append(f"{gain_text(gain) or '         '} ", style="bold green" if gain else "")
    text.append(a["title"], style="bold" if is_recommended(a) else "dim")
    if a.get("result"):
        text.append(f"  [{result_text(a['result'])}]", style="cyan" if status == KEPT else "dim")
    elif status != OPEN:
        text.append(f"  [{status}]", style="yellow" if status == APPLYING else "dim")
    elif a.get("action") == "hot_apply" and offer_apply:
        text.append("  [a: apply]", style="green")
    text.append(f"\n  {a['evidence']}", style="dim")
    return text


class AdviceList(Panel, OptionList):
    panel_id = "advice"

    def signature(self, snap) -> object:
        return [(a["id"], a.get("status"), a["evidence"]) for a in snap.advice]

    def show(self, snap) -> None:
        advice, offer_apply = snap.advice, snap.replay is None  # a replay offers no apply
        # Problems by estimated gain, then suggestions; what was tried or dismissed last
        ordered = sorted(advice, key=lambda a: (not is_recommended(a), a.get("kind") == SUGGESTION,
                                                -(a.get("est_gain") or 1.0)))
        ids = [a["id"] for a in ordered]
        current = [option.id for option in self.options]
        highlighted = self.highlighted_option.id if self.highlighted_option is not None else None
        if ids == current:
            for a in ordered:
                self.replace_option_prompt(a["id"], advice_line(a, offer_apply))
            return
        self.clear_options()
        self.add_options([Option(advice_line(a, offer_apply), id=a["id"]) for a in ordered])
        if ordered:
            self.highlighted = ids.index(highlighted) if highlighted in ids else 0

    @property
    def selected_id(self) -> str | None:
        option = self.highlighted_option
        return option.id if option is not None else None
