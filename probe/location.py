"""Find the user's file:line that called into torch (skipping torch, fastmon, stdlib)."""

from __future__ import annotations

import os
import sys
import sysconfig

import fastmon

_SKIP = tuple(
    p + os.sep for p in {
        os.path.dirname(os.path.abspath(fastmon.__file__)),
        os.path.dirname(os.path.abspath(__file__)),
        sysconfig.get_paths().get("stdlib", "\0"),
        sysconfig.get_paths().get("purelib", "\0"),
        sysconfig.get_paths().get("platlib", "\0"),
    } if p
)
_FASTMON = tuple(os.path.dirname(os.path.abspath(path)) + os.sep for path in (fastmon.__file__, __file__))
_LIBRARIES = tuple(p + os.sep for p in {sysconfig.get_paths().get(k) for k in ("purelib", "platlib")} if p)
_cache: dict[str, bool] = {}


def _is_user_file(filename: str) -> bool:
    known = _cache.get(filename)
    if known is None:
        path = os.path.abspath(filename)
        known = not filename.startswith("<") and not path.startswith(_SKIP)
        _cache[filename] = known
    return known


def user_frame(depth: int = 2):
    """The innermost frame in user code, as (filename, lineno), or None."""
    frame = sys._getframe(depth)
    while frame is not None:
        if _is_user_file(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def called_by_fastmon(depth: int = 2) -> bool:
    """Whether the first caller outside the installed libraries (torch) is fastmon itself
    (its own profiler capture), not the script."""
    frame = sys._getframe(depth)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_LIBRARIES):
        frame = frame.f_back
    return frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_FASTMON)


def fmt(location) -> str | None:
    if not location:
        return None
    filename, lineno = location
    try:
        relative = os.path.relpath(filename)
        if not relative.startswith(".."):
            filename = relative
    except ValueError:
        pass
    return f"{filename}:{lineno}"
