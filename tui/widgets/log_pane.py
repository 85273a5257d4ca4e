"""Everything the script prints, stdout and stderr, scrollable; nothing is dropped from
the run record (the pane keeps the last MAX_LINES on screen).

A carriage return rewrites the line, as in a terminal: a progress bar (tqdm redraws its
line with ``\\r`` several times a second, on stderr) is one line here, its last state,
not every redraw joined; the line still being drawn shows in the ``LiveLine`` below."""

from __future__ import annotations

import re

from rich.text import Text
from textual.widgets import RichLog, Static

MAX_LINES = 5000


def as_shown(line: str) -> str:
    """What a terminal leaves of a line that ``\\r`` rewrote: its last rewrite (tqdm pads
    each to the full width). A ``\\r\\n`` ending is no rewrite."""
    return line.removesuffix("\r").rpartition("\r")[2]


# stderr carries progress bars, logging and warnings as much as errors: only what reads
# as an error (a traceback, "ValueError: ...") is red; the rest as a terminal shows it.
ERROR_LINE = re.compile(r"^(Traceback \(most recent call last\)|[A-Za-z_.]*(Error|Exception)\b.*:)")


def styled(stream: str, line: str, **kwargs) -> Text:
    """The line as a terminal shows it: its ANSI colours drawn, not printed as escapes."""
    return Text.from_ansi(line, style="red" if stream == "stderr" and ERROR_LINE.match(line) else "", **kwargs)


class LogPane(RichLog):
    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=MAX_LINES, wrap=True, markup=False, highlight=False, **kwargs)
        self._partial = {"stdout": "", "stderr": ""}
        self.live = ("", "")  # (stream, the line being drawn) as last updated

    def add(self, chunks: list[tuple[str, str]]) -> None:
        for stream, text in chunks:
            lines = (self._partial[stream] + text).split("\n")
            rest = lines.pop()
            # Only the last rewrite of the unfinished line can still show: a bar redrawn
            # for an hour is kept as one line, not an hour of redraws. A final "\r" stays:
            # it may be half of a "\r\n".
            self._partial[stream] = rest[rest.rfind("\r", 0, len(rest) - 1) + 1:]
            for line in lines:
                self.write(styled(stream, as_shown(line)))
            drawing = as_shown(self._partial[stream])
            if drawing:
                self.live = (stream, drawing)
            elif self.live[0] == stream:  # finished: the other stream's line, if one is being drawn
                other = "stderr" if stream == "stdout" else "stdout"
                shown = as_shown(self._partial[other])
                self.live = (other, shown) if shown else ("", "")

    def start_over(self) -> None:
        """Empty, as before the first chunk (a replay moved back)."""
        self.clear()
        self._partial = {"stdout": "", "stderr": ""}
        self.live = ("", "")

    def flush_partial(self) -> None:
        for stream, rest in self._partial.items():
            if shown := as_shown(rest):
                self.write(styled(stream, shown))
        self._partial = {"stdout": "", "stderr": ""}
        self.live = ("", "")


class LiveLine(Static):
    """The line the script is drawing now (a progress bar), under the output."""

    def show(self, stream: str, line: str) -> None:
        self.set_class(not line, "-empty")
        self.update(styled(stream, line, no_wrap=True, overflow="ellipsis"))
