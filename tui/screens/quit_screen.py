"""`q` while training runs: stop it, detach (it finishes headless, still recorded), or stay."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class QuitScreen(ModalScreen[str | None]):
    # q again leaves without losing anything (detach); Ctrl-C again stops, as a second
    # Ctrl-C would in a terminal. No other letter: d and s mean dismiss and save on the
    # dashboard behind, and one letter has one meaning.
    BINDINGS = [Binding("escape", "dismiss(None)", "Stay"), Binding("q", "choose('detach')", "Detach"),
                Binding("ctrl+c", "choose('stop')", "Stop", priority=True)]

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box"):
            yield Label("The training is still running. Records keep being written either way.\n"
                        "q again detaches; Ctrl-C again stops it.")
            with Horizontal(id="quit-buttons"):
                # labels are markup: a key's brackets are escaped, or "[d]" reads as a style
                yield Button("Stop training \\[ctrl+c]", id="stop", variant="error")
                yield Button("Detach, let it finish \\[q]", id="detach", variant="primary")
                yield Button("Stay \\[esc]", id="stay")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "stay" else event.button.id)

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
