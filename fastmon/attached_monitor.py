"""``python -m fastmon.attached_monitor``: the monitor of a job that called
``fastmon.attach()`` (``fastmon.attaching`` starts it). It forks once: the first half
returns to the caller once the second, in a session of its own, listens and has written
the job's address file. The second records the job as ``fastmon run --headless`` would,
without its output (not piped: a pipe would change ``isatty`` for progress bars), and ends
when the job's root process does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

MONITOR_START_S = 60.0  # a loaded node takes seconds to start python and import the monitor


def wait_for(path: str, child: int, within: float) -> bool:
    """The first half: whether the detached half wrote ``path`` in time."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        if os.waitpid(child, os.WNOHANG)[0]:
            return os.path.exists(path)
        time.sleep(0.02)
    return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fastmon.attached_monitor")
    parser.add_argument("--info", required=True, help="where to write the job's address, once listening")
    parser.add_argument("--root", type=int, required=True, help="the job's root process")
    parser.add_argument("--launcher", action="store_true", help="the root is a launcher; its children are the ranks")
    parser.add_argument("--settings", required=True, help="fastmon.attach()'s arguments, as JSON")
    args = parser.parse_args(argv)
    child = os.fork()
    if child:
        os._exit(0 if wait_for(args.info, child, MONITOR_START_S) else 1)
    os.setsid()
    try:
        session, settings = started(args)
    except Exception as exc:  # the script runs on unwatched: one line, not the monitor's traceback
        sys.stderr.write(f"[fastmon] attach: the monitor could not start: {type(exc).__name__}: {exc}\n")
        os._exit(1)
    from fastmon.headless import StatusPrinter

    printer = None
    if settings["status"]:
        session.output.say([f"[fastmon] attached: recording to {session.run_dir} (fastmon watch {session.run_dir} "
                            "shows it live)"])
        printer = StatusPrinter(session)
        printer.start()
    try:
        session.wait()
    finally:
        if printer is not None:
            printer.stop()
        for path in (args.info, args.info.removesuffix(".json") + ".lock"):  # the job is over: no rank takes them
            try:
                os.remove(path)
            except OSError:
                pass


def started(args):
    """The session, recording and listening, and fastmon.attach()'s arguments; the job's
    address file written."""
    from fastmon.attached_session import AttachedSession
    from fastmon.session import RunOptions

    settings = json.loads(args.settings)
    options = RunOptions(target=settings["target"], apply=settings["apply"], allow=frozenset(settings["allow"]),
                         runs_dir=settings["runs_dir"], log_to=tuple(settings["log_to"]),
                         tokens_per_sample=settings["tokens_per_sample"])
    session = AttachedSession(options, args.root, args.launcher, status=settings["status"])
    session.start()
    write_info(args.info, {"channel": session.channel.path, "secret": session.channel.secret,
                           "run_dir": str(session.run_dir), "monitor_pid": os.getpid()})
    return session, settings


def write_info(path: str, info: dict) -> None:
    """Whole or not at all, readable by this user alone (it holds the run's secret)."""
    partial = f"{path}.{os.getpid()}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.replace(partial, path)


if __name__ == "__main__":
    main(sys.argv[1:])
