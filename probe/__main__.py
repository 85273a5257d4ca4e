"""``python -m fastmon.probe [-m MODULE | SCRIPT] ARGS``: run a script as ``python`` would,
with the probe installed. The monitor starts this; it also works alone (no channel)."""

from __future__ import annotations

import atexit
import os
import runpy
import shutil
import signal
import sys
import traceback
import zipfile

from fastmon.probe import FASTMON_FOLDERS
from fastmon.probe.exit_signals import script_signals_set_aside

EXIT_USAGE = 2


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback as python would print it: without runpy's frames before the script's,
    nor fastmon's wherever its hooks stood between the script and torch."""
    with script_signals_set_aside():
        report = traceback.TracebackException.from_exception(exc)
        _drop_own_frames(report, set())
        sys.stderr.write("".join(report.format()))
        sys.stderr.flush()


def _drop_own_frames(report, seen: set) -> None:
    if report is None or id(report) in seen:
        return
    seen.add(id(report))
    frames = [frame for frame in report.stack if not frame.filename.startswith(FASTMON_FOLDERS)]
    while frames and "runpy" in os.path.basename(frames[0].filename):
        del frames[0]
    report.stack = traceback.StackSummary.from_list(frames)
    for chained in (report.__cause__, report.__context__, *(getattr(report, "exceptions", None) or ())):
        _drop_own_frames(chained, seen)


def _module_exists(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def main() -> None:
    args = sys.argv[1:]
    if not args:
        sys.stderr.write("usage: python -m fastmon.probe [-m MODULE | SCRIPT] [ARGS...]\n")
        sys.exit(EXIT_USAGE)
    module = None
    if args[0] == "-m":
        if len(args) < 2:
            sys.stderr.write("fastmon: -m needs a module name\n")
            sys.exit(EXIT_USAGE)
        module, rest = args[1], args[2:]
    else:
        script, rest = args[0], args[1:]
        if not os.path.exists(script):
            sys.stderr.write(f"fastmon: can't open file {script!r}: no such file\n")
            sys.exit(EXIT_USAGE)

    if module is not None and not _module_exists(module):
        sys.stderr.write(f"fastmon: no module named {module!r}\n")
        sys.exit(EXIT_USAGE)

    from fastmon.probe.output import keep_output
    from fastmon.probe.runtime import install

    keeper = keep_output(os.environ.get("FASTMON_RUN_DIR"))
    atexit.register(keeper.close)  # after the probe's own close (atexit runs last in, first out)
    channel = os.environ.get("FASTMON_CHANNEL")
    monitor = int(os.environ.get("FASTMON_MONITOR_PID", "0") or 0)

    def take_socket_folder() -> None:
        if keeper.orphaned and channel and monitor and not _alive(monitor):  # killed: it would stay in /tmp
            shutil.rmtree(os.path.dirname(channel), ignore_errors=True)

    def monitor_gone() -> None:
        keeper.monitor_gone()
        take_socket_folder()

    atexit.register(take_socket_folder)  # again at the end: a killed monitor may not be reaped yet when it goes
    publisher = install(channel).publisher
    publisher.on_lost = monitor_gone
    publisher.on_output_closed = keeper.let_go

    try:
        if module is not None:
            sys.argv = [module, *rest]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [script, *rest]
            if os.path.isfile(script) and not zipfile.is_zipfile(script):
                sys.path[0] = os.path.dirname(os.path.abspath(script))
                runpy.run_path(os.path.abspath(script), run_name="__main__")  # __file__ absolute, as python's
            else:
                # A folder or zip, run by its __main__.py. runpy puts the path first on sys.path
                # and names __file__ from it: absolute, as python's are (sys.argv[0] too, which
                # python leaves as typed; argparse's prog, its base name, is the same).
                del sys.path[0]
                runpy.run_path(os.path.abspath(script), run_name="__main__")
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        _print_user_traceback(exc)
        from fastmon.probe.runtime import current

        current().close()
        # Die of SIGINT as python does, so the parent sees the same status.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException as exc:
        _print_user_traceback(exc)
        sys.exit(1)


if __name__ == "__main__":
    main()
