"""Everything the script prints, stdout and stderr, scrollable; nothing is dropped from
the run record (the pane keeps the last MAX_LINES on screen)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

MAX_LINES = 5000


class LogPane(RichLog):
    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=MAX_LINES, wrap=True, markup=False, highlight=False, **kwargs)
        self._partial = {"stdout": "", "stderr": ""}

    def add(self, chunks: list[tuple[str, str]]) -> None:
        for stream, text in chunks:
            text = self._partial[stream] + text
            lines = text.split("\n")
            self._partial[stream] = lines.pop()
            for line in lines:
                self.write(Text(line, style="red" if stream == "stderr" else ""))

    def flush_partial(self) -> None:
        for stream, rest in self._partial.items():
            if rest:
                self.write(Text(rest, style="red" if stream == "stderr" else ""))
        self._partial = {"stdout": "", "stderr": ""}
