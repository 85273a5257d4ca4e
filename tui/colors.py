"""Phase colours, the same in every chart, bar and table."""

from fastmon.phases import PHASES

PHASE_COLORS = {
    "data_wait": "red",
    "h2d": "magenta",
    "forward": "blue",
    "backward": "cyan",
    "optimizer": "green",
    "sync": "yellow",
    "other": "white",
}
PHASE_LABELS = {"data_wait": "data", "h2d": "h2d", "forward": "fwd", "backward": "bwd", "optimizer": "opt",
                "sync": "sync", "other": "other"}
assert set(PHASE_COLORS) == set(PHASES)
STARVED_SHARE = 0.3  # a data_wait share above this is shown as a starved run
