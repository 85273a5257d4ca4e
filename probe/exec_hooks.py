"""``os.execv`` and ``os.execve`` (every ``os.exec*`` ends in one of them): the training
process about to become another program. fastmon does not follow it (the new program has
no probe, and its steps would restart from 0 under the same rank), so the probe says so
first: an ``exec`` event with the new command line and the step reached, then its last
steps and its bye, as at an exit (``atexit`` never runs across an exec). A call that is
going to fail (no such program) is passed on untouched."""

from __future__ import annotations

import os

from fastmon.probe.guard import Part

SHOWN_ARGS = 8  # of the new command line, in the event


class ExecPart(Part):
    name = "exec"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.originals = {"execv": os.execv, "execve": os.execve}

    def install(self) -> None:
        part = self
        for name, original in self.originals.items():
            def exec_(path, args, *rest, _original=original):
                if part.on and isinstance(path, (str, bytes, os.PathLike)) and os.access(path, os.X_OK):
                    part.said_before(path, args)
                return _original(path, args, *rest)

            exec_.__wrapped__ = original
            exec_.__doc__ = original.__doc__
            setattr(os, name, exec_)

    def said_before(self, path, args) -> None:
        probe = self.probe
        try:
            shown = [os.fsdecode(a) for a in list(args)[:SHOWN_ARGS]]
            probe.event("exec", path=os.fsdecode(path), argv=shown)
        except Exception as exc:
            probe.report_fault(self.name, exc)
        probe.close()  # never raises: the exec is the script's

    def uninstall(self) -> None:
        for name, original in self.originals.items():
            setattr(os, name, original)
