"""Phase colours, the same in every chart, bar and table."""

from fastmon.phases import PHASE_LABELS, PHASES

PHASE_COLORS = {  # rich
    "data_wait": "red",
    "h2d": "magenta",
    "forward": "blue",
    "backward": "cyan",
    "optimizer": "green",
    "sync": "dark_orange",
    "comm": "bright_magenta",
    "other": "white",
}
assert set(PHASE_COLORS) == set(PHASE_LABELS) == set(PHASES)
STARVED_SHARE = 0.3  # a data_wait share above this is shown as a starved run
