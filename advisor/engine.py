"""Runs every rule over a window and the facts; ordered by estimated gain."""

from __future__ import annotations

from fastmon.advisor.facts import Facts
from fastmon.advisor.rules import RULES
from fastmon.advisor.types import Advice
from fastmon.advisor.window import Window


def advise(window: Window, facts: Facts, disabled: frozenset = frozenset()) -> list[Advice]:
    found = []
    for rule in RULES:
        if rule.ID in disabled:
            continue
        advice = rule.check(window, facts)
        if advice is not None:
            found.append(advice)
    return sorted(found, key=lambda a: -(a.est_gain or 1.0))
