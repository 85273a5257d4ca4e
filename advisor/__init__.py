"""The advisor: pure rules from a window of step records and run facts to advice.

``advise(window, facts) -> list[Advice]``; no I/O, deterministic. One rule per module in
``rules/``, each with a stable id, named thresholds and a what/why/fix docstring.

May import: the standard library and the shared vocabulary ``fastmon.common``. Never torch, textual, the
probe or the TUI (checked by tests/test_layering.py).
"""

from fastmon.advisor.engine import advise, rules_digest
from fastmon.advisor.facts import Facts
from fastmon.advisor.types import Advice
from fastmon.advisor.window import Window, recent

__all__ = ["Advice", "Facts", "Window", "advise", "recent", "rules_digest"]
