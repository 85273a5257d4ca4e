"""Runs every rule over a window and the facts; ordered by estimated gain, after the rules
that fix what the other estimates assume (``FIRST``: while one of those fires, the others'
estimates are withheld, with its reason). The rules' digest stamps each record, so that
advice recorded by other rules is derived again."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

from fastmon.advisor.facts import Facts
from fastmon.advisor.rules import BY_ID, RULES
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
    first = [a for a in found if getattr(BY_ID[a.id], "FIRST", False)]
    # ordered by the estimates before any is withheld: a low one is still a ranking (the
    # busy mistakes.py tried set_to_none before anomaly detection, for the whole run)
    found = sorted(found, key=lambda a: (a not in first, -(a.est_gain or 1.0)))
    if first:
        why = BY_ID[first[0].id].WHY_NOT_ESTIMATED
        found = [a if a in first or a.est_gain is None else
                 dataclasses.replace(a, est_gain=None, evidence=f"{a.evidence} (not estimated: {why})") for a in found]
    return found


@functools.cache
def rules_digest() -> str:
    """A digest of the advisor's source (its rules, thresholds and texts): two records with
    the same digest were advised by the same rules."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for path in sorted(here.rglob("*.py")):
        digest.update(path.relative_to(here).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]
