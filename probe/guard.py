"""Fault isolation: a probe part that raises is switched off, reported once, and the
user's call goes on exactly as if the probe were not there."""

from __future__ import annotations

import traceback


class Part:
    """Base for one hook family. Subclasses set ``name`` and implement install/uninstall
    (what stays in for the whole run); the hooks that time phases go in with ``arm`` and
    out with ``disarm``, so that steps the probe does not time run without them."""

    name = "part"

    def __init__(self, probe) -> None:
        self.probe = probe
        self.on = True

    def install(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def uninstall(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def arm(self) -> None:
        pass

    def disarm(self) -> None:
        pass

    def fail(self, exc: BaseException) -> None:
        if not self.on:
            return
        self.on = False
        try:
            self.uninstall()
        except Exception:
            pass
        self.probe.report_fault(self.name, exc)


def describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
