"""Replay's position: where the scrubber stands in the recorded run, and its keys."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

KEYS = "  ←/→ a step · shift 10 · PgUp/PgDn 100 · home/end"


class PositionBar(Static):
    def show(self, position: int, length: int) -> None:
        label = f" {position:,} of {length:,} steps "
        width = max(self.size.width - len(label) - len(KEYS), 10)
        at = round((position - 1) / max(length - 1, 1) * (width - 1)) if length else 0
        text = Text(label, style="bold")
        text.append("━" * at, style="magenta")
        text.append("●", style="bold magenta")
        text.append("─" * (width - at - 1), style="dim")
        text.append(KEYS, style="dim")
        self.update(text)
