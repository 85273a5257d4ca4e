"""Under DDP, one cell per rank (its rate, median step, data wait) and the straggler."""

from __future__ import annotations

import time

from textual.widgets import Static

from fastmon.tui.widgets.panel import Panel


def rank_line(snap) -> str:
    cells = [f"rank {r['rank']}: {r['steps_per_s']:.1f} steps/s, step {r['step_ms']['median']:.1f} ms, "
             f"data {r['phases']['data_wait']:.0%}" for r in snap.ranks]
    straggler = f"  ▶ straggler: rank {snap.straggler}" if snap.straggler is not None else "  no straggler"
    lost = "".join(f"  ✖ node {node} lost at {time.strftime('%H:%M:%S', time.localtime(at))}"
                   for node, at in snap.nodes_lost.items())
    return " │ ".join(cells) + straggler + lost


class RankLine(Panel, Static):
    panel_id = "ranks"

    def signature(self, snap) -> object:
        return [(r["rank"], r["steps"]) for r in snap.ranks], snap.nodes_lost

    def show(self, snap) -> None:
        self.display = bool(snap.ranks)
        if snap.ranks:
            self.update(rank_line(snap))
