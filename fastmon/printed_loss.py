"""The training loss as the script printed it ("iter 10: loss 4.18", "{'loss': 4.18, ...}",
"loss=0.23" in a progress bar): a value the script itself brought to the host, so reading
it adds no device synchronization and no work in the training process. Validation and
evaluation losses are not it."""

from __future__ import annotations

import re

LOSS = re.compile(
    r"(?<![A-Za-z_])(?<!val )(?<!valid )(?<!eval )(?<!test )(?:train[_ ]?)?loss['\"]?\s*[:=]?\s*['\"]?"
    r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![\d.])", re.IGNORECASE)


def printed_losses(text: str) -> list[float]:
    """The training losses in ``text``: the last one a line shows (a progress bar redraws)."""
    found = []
    for line in text.split("\n"):
        values = LOSS.findall(line.rpartition("\r")[2])
        if values:
            found.append(float(values[-1]))
    return found
