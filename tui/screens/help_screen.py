"""`?`: what every key does and what the panels show."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# fastmon — keys

| key | does |
| --- | --- |
| `↑` `↓` | select advice |
| `enter` | advice detail: why, how to fix, where in your code |
| `a` | apply the selected advice live (an experiment: measured, kept or reverted) |
| `d` | dismiss the selected advice |
| `c` | applied changes with their measured before/after |
| `p` | pause / resume the charts (the training keeps running) |
| `e` | export the run, as recorded so far, as a trace for Perfetto or chrome://tracing (`RUN/trace.json`) |
| `t` | capture the next steps with torch.profiler: the trace, the top operators and torch's anti-pattern check open here when ready (replay: the run's last capture) |
| `q`, `ctrl+c` | quit: stop the training, or detach and let it finish headless |
| `←` `→` `home` `end` | replay: move through the recorded steps (shift: 10x) |
| `?` | this help; `escape` closes it |

**Where the step goes** stacks each phase's time per step: *data* (waiting for the
DataLoader), *h2d* (copies to the GPU), *fwd*, *bwd*, *opt*, *sync* (host waiting for
the GPU), *comm* (torch.distributed collectives, DDP's all-reduce wait), *other*. The
same colours are used everywhere.

Records keep being written to the run folder whatever you do here.
"""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Markdown(HELP)
