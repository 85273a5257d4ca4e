"""`t`: a torch.profiler capture's findings: the trace file, the top operators, torch's
anti-pattern matches with their place in the user's code."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from fastmon.report import profile_lines


class ProfileScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,t", "dismiss", "Close")]

    def __init__(self, captures: list[dict]) -> None:
        super().__init__()
        self.captures = captures  # one per rank, of the same steps

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="profile-box"):
            yield Label("torch.profiler capture (these steps ran slower under it; the trace opens in "
                        "ui.perfetto.dev or chrome://tracing)   escape: close")
            for capture in self.captures:
                text = Text()
                for i, line in enumerate(profile_lines(capture)):
                    text.append(line + "\n", style="bold" if i == 0 else "")
                yield Static(text, classes="capture")
