"""Lines that fit their widget by leaving items out whole, the least important first:
never half a figure, never a "…" where a digit or a unit was."""

from __future__ import annotations

import textwrap

from rich.text import Text


def fitted(items: list[tuple[int, Text]], width: int, gap: str = " · ", lead: str = " ") -> Text:
    """The items (rank, text; 0 first) that fit ``width`` after ``lead``, the best ranked
    first, in their order."""
    kept, used = set(), len(lead)
    for index in sorted(range(len(items)), key=lambda i: items[i][0]):
        need = items[index][1].cell_len + (len(gap) if kept else 0)
        if used + need <= width:
            kept.add(index)
            used += need
    line = Text(lead)
    for index in sorted(kept):
        if line.cell_len > len(lead):
            line.append(gap)
        line.append_text(items[index][1])
    return line


def wrapped_lines(text: str, width: int, style: str = "") -> list[Text]:
    """A long sentence over as many lines as it takes, broken between words."""
    return [Text(line, style=style) for line in textwrap.wrap(text, max(width, 10))]
