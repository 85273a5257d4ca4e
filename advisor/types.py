"""What a rule returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

HOT_APPLY = "hot_apply"
CODE_CHANGE = "code_change"
# A problem is measured in this run (evidence, estimated gain, fix); a suggestion is a good
# habit the run lacks (a learning-rate schedule), with no cost measured. A healthy run has
# no problems; it may have suggestions.
PROBLEM = "problem"
SUGGESTION = "suggestion"


@dataclass(frozen=True)
class Apply:
    """A change the probe can make live: an action name and its parameters. ``search``
    lists candidate parameter sets to try in turn (keep the best); ``changes_maths`` marks
    the changes that need the user's accept (AMP, TF32, batch size)."""

    action: str
    params: dict = field(default_factory=dict)
    search: tuple = ()
    changes_maths: bool = False


# How a Permanent goes into the script (fastmon.permanent writes it, `fastmon report --patch`)
KEYWORDS = "keywords"  # these keyword arguments on the call at the location
REPLACE_CALL = "call"  # the call at the location (one named in ``calls``) becomes ``code``
AFTER_IMPORT = "after_import"  # ``code`` as a statement after the script's ``import torch``
BY_HAND = ""  # written by hand (``code`` says what)


@dataclass(frozen=True)
class Permanent:
    """The code that keeps a live change after fastmon ("make it permanent"): what the
    user reads (``code``) and how it goes into the script at the advice's location."""

    code: str
    edit: str = BY_HAND
    keywords: dict = field(default_factory=dict)
    calls: tuple = ()  # the names of the calls it may change at the location
    note: str = ""


@dataclass(frozen=True)
class Advice:
    id: str
    title: str
    evidence: str
    est_gain: float | None  # upper bound on the speed-up, as a factor (1.6 = +60%)
    action: str  # HOT_APPLY or CODE_CHANGE
    fix: str  # the code change, or what the hot-apply does
    why: str = ""
    location: str | None = None
    apply: Apply | None = None
    confidence: str = "high"
    kind: str = PROBLEM

    def to_dict(self) -> dict:
        out = asdict(self)
        out["apply"] = asdict(self.apply) if self.apply else None
        return out


def amdahl(share: float, speedup: float = float("inf")) -> float:
    """Whole-step speed-up when a part taking ``share`` of it gets ``speedup`` times faster."""
    share = min(max(share, 0.0), 0.999)
    rest = share / speedup if speedup != float("inf") else 0.0
    return 1.0 / (1.0 - share + rest)


def gain_text(est_gain: float | None) -> str:
    """How an estimate reads on screen. An estimate, not a bound: Amdahl's law on the
    measured share, while compute that stops waiting often gets faster too (warm caches,
    busy thread pools), so a measured result can beat it."""
    return f"est. {est_gain:.1f}x" if est_gain else ""
