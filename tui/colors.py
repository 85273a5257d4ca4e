"""Phase colours, the same in every chart, bar and table."""

from fastmon.common.phases import PHASE_LABELS, PHASES

# Eight colours told apart on a dark or a light theme, by most colour-blind eyes too
# (Tableau 10), and the same in any terminal: true colours, not the theme's ANSI sixteen,
# which drew data, h2d and comm in one red.
PHASE_COLORS = {
    "data_wait": "#e15759",  # red: the one to notice
    "h2d": "#f28e2b",  # orange
    "forward": "#4e79a7",  # blue
    "backward": "#76b7b2",  # teal
    "optimizer": "#59a14f",  # green
    "sync": "#edc948",  # yellow
    "comm": "#b07aa1",  # purple
    "other": "#bab0ac",  # grey
}
assert set(PHASE_COLORS) == set(PHASE_LABELS) == set(PHASES)
