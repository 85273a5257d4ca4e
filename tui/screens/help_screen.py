"""`?`: what every key does and what the panels show."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

# (keys, what they do, live only): a replay has no training to change or stop
KEYS = (
    ("`↑` `↓`", "select advice", False),
    ("`enter`", "advice detail: why, how to fix, where in your code", False),
    ("`a`", "apply the selected advice live (an experiment: measured, kept or reverted)", True),
    ("`d`", "dismiss the selected advice", True),
    ("`c`", "applied changes with their measured before/after", False),
    ("`p`", "pause / resume the charts (the training keeps running)", False),
    ("`l`", "the data pipeline in the GPU and host panels' place (at 80 columns, the chart's room); `l` again: back",
     False),
    ("`s`", "save the screen as an SVG in the run's folder", False),
    ("`e`", "export the run, as recorded so far, as a trace for Perfetto or chrome://tracing (`RUN/trace.json`)",
     False),
    ("`t`", "capture the next steps with torch.profiler: the trace, the top operators and torch's anti-pattern "
            "check open here when ready (replay: the run's last capture)", False),
    ("`q`, `ctrl+c`", "quit: stop the training, or detach and let it finish headless (then Ctrl-C stops it)", True),
    ("`q`", "quit the replay", None),
    ("`←` `→` `home` `end`", "move through the recorded steps (shift: 10x, `PgUp` `PgDn`: 100)", None),
    ("`?`", "this help; `escape` closes it", False),
)

PANELS = """\
**Where the step goes** stacks each phase's time per step: *data* (waiting for the
DataLoader), *h2d* (copies to the GPU), *fwd*, *bwd*, *opt*, *sync* (host waiting for
the GPU), *comm* (the step waiting in torch.distributed collectives: FSDP's all-gathers and
reduce-scatters, DDP's all-reduce tail; collectives that run under compute are not in it),
*other*. The same colours are used everywhere. A language model's header shows tokens/s.

**The data pipeline** (`l`) says what *data* waits for: each stage of making a sample (a
transform, the rest of `__getitem__`, `collate_fn`) with its file:line, its CPU / wall ms a
sample and a bar as long as its wall time, the slowest first; the bar's solid part is CPU,
the shaded rest waiting, and a stage that mostly waits (a read, a sleep) is marked *waits*.
Then the per-batch stages and each DataLoader worker, where the probe timed them.
"""


WATCH_KEYS = (("`a`", "ask the monitor recording the run to apply the selected advice live (under the run's own "
                       "`--apply`: `never` refuses, and says how to allow it)"),
              ("`d`", "ask it to dismiss the selected advice"))


def help_text(replay: bool, watching: bool = False) -> str:
    """The keys of a live run or of a replay (``None`` in KEYS: a replay's only); a watch
    (``fastmon watch``) is a replay whose a and d reach the run's monitor."""
    rows = [f"| {keys} | {does} |" for keys, does, live in KEYS
            if (live is None and replay) or (live is True and not replay) or live is False]
    if watching:
        rows[2:2] = [f"| {keys} | {does} |" for keys, does in WATCH_KEYS]
    end = ("A watch reads the record another fastmon writes; quitting it leaves that run alone." if watching else
           "A replay reads the record; nothing here changes it." if replay else
           "Records keep being written to the run folder whatever you do here.")
    return "\n".join(["# fastmon — keys", "", "| key | does |", "| --- | --- |", *rows, "", PANELS, end, ""])


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, replay: bool = False, watching: bool = False) -> None:
        super().__init__()
        self.replay, self.watching = replay, watching

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Markdown(help_text(self.replay, self.watching))
