"""`c`: the changes applied live, each with its measured before/after and the verdict."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from fastmon.common.verdicts import params_text, result_text


class AppliedScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,c", "dismiss", "Close")]

    def __init__(self, applied: list[dict]) -> None:
        super().__init__()
        self.applied = applied

    def compose(self) -> ComposeResult:
        with Vertical(id="applied-box"):
            yield Label("Changes applied live (samples/s measured over a window before and after)")
            yield DataTable(id="applied-table", cursor_type="row")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("advice", "tried from step", "setting", "before /s", "after /s", "change", "verdict")
        for a in self.applied:
            speedup = a.get("speedup")
            table.add_row(a["id"], str(a["step"]), params_text(a.get("params") or {}), f"{a['before_samples_per_s']:,.1f}",
                          f"{a['after_samples_per_s']:,.1f}" if a.get("after_samples_per_s") else "—",
                          f"{speedup:.2f}x" if speedup else "—",
                          result_text(a))
        if not self.applied:
            table.add_row("nothing applied yet", "", "", "", "", "", "")
