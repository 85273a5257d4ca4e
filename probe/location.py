"""Find the user's file:line that called into torch (skipping torch, fastmon, stdlib)."""

from __future__ import annotations

import os
import site
import sys
import sysconfig

from fastmon.probe import FASTMON_FOLDERS


def _library_folders() -> set[str]:
    """Where installed libraries live: the interpreter's, the user's (``pip install --user``),
    any site-packages folder, and torch's own folder wherever it was found (a PYTHONPATH or
    vendored install): advice must never point into torch."""
    paths = {sysconfig.get_paths().get(key) for key in ("purelib", "platlib")}
    paths |= {*site.getsitepackages(), site.getusersitepackages()} if hasattr(site, "getsitepackages") else set()
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        paths.add(os.path.dirname(os.path.abspath(torch.__file__)))
    return {os.path.abspath(p) for p in paths if p}


_LIBRARIES = tuple(p + os.sep for p in _library_folders())
_SKIP = (*FASTMON_FOLDERS, *_LIBRARIES, os.path.abspath(sysconfig.get_paths().get("stdlib", "\0")) + os.sep)
PACKAGE_FOLDER_NAMES = ("site-packages", "dist-packages")  # where installed packages live
_PACKAGE_FOLDERS = tuple(os.sep + name + os.sep for name in PACKAGE_FOLDER_NAMES)
_cache: dict[str, bool] = {}


def is_user_file(filename: str) -> bool:
    """Not torch's, fastmon's, the standard library's or an installed package's."""
    known = _cache.get(filename)
    if known is None:
        path = os.path.abspath(filename)
        known = not filename.startswith("<") and not path.startswith(_SKIP) and not any(
            folder in path for folder in _PACKAGE_FOLDERS)
        _cache[filename] = known
    return known


def user_frame(depth: int = 2):
    """The innermost frame in user code, as (filename, lineno), or None."""
    frame = sys._getframe(depth)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def called_by_fastmon(depth: int = 2) -> bool:
    """Whether the first caller outside the installed libraries (torch) is fastmon itself
    (its own profiler capture), not the script."""
    frame = sys._getframe(depth)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_LIBRARIES):
        frame = frame.f_back
    return frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(FASTMON_FOLDERS)


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
