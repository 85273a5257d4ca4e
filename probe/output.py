"""Keep the script's prints safe when the monitor goes away.

The child's stdout and stderr are pipes to the monitor. If the monitor is killed, a
write would raise BrokenPipeError inside the user's ``print``; instead the stream
switches to a file in the run folder, so the training goes on and nothing is lost.
"""

from __future__ import annotations

import os
import sys

ORPHAN_LOG = "output-after-monitor-exit.log"


class SafeStream:
    def __init__(self, stream, fallback_dir: str | None) -> None:
        self._stream = stream
        self._fallback_dir = fallback_dir

    def _switch(self):
        path = os.path.join(self._fallback_dir, ORPHAN_LOG) if self._fallback_dir else os.devnull
        try:
            self._stream = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
        except OSError:
            self._stream = open(os.devnull, "w")
        return self._stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except (BrokenPipeError, ValueError, OSError):
            return self._switch().write(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        try:
            self._stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._switch()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def protect_streams(fallback_dir: str | None) -> None:
    sys.stdout = SafeStream(sys.stdout, fallback_dir)
    sys.stderr = SafeStream(sys.stderr, fallback_dir)
