"""Start the dashboard over a new session (``fastmon run``) or a recorded run (``replay``)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from fastmon.common.run_status import RunStatus
from fastmon.tui.app import FastmonApp
from fastmon.tui.snapshot import FollowSource, LiveSource, ReplaySource


def run_dashboard(options, exit_on_finish: bool = False) -> tuple[int, Path]:
    from fastmon.headless import StatusPrinter
    from fastmon.session import Session

    session = Session(options, passthrough=False)
    session.start()
    app = FastmonApp(LiveSource(session), session=session, exit_on_finish=exit_on_finish)
    result = app.run()
    if result == "detach" and session.view.status == RunStatus.RUNNING:
        # The dashboard is gone; the training finishes here, headless, still recorded.
        session.passthrough = True
        # Ctrl-C now reaches the training from the terminal, as in a headless run; the
        # monitor stays to record its end and print the summary
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, lambda *_: None)
        sys.stderr.write(f"[fastmon] detached: the training goes on, recorded in {session.run_dir} "
                         "(Ctrl-C stops it)\n")
        printer = StatusPrinter(session)
        printer.start()
        code = session.wait()
        printer.stop()
        from fastmon.report import summary_text

        sys.stderr.write("\n" + summary_text(session.run_dir) + "\n")  # as a headless run ends
        return code, session.run_dir
    code = session.wait()  # at once if the dashboard's worker already saw the end
    from fastmon.report import summary_text

    sys.stderr.write(summary_text(session.run_dir) + "\n")
    return code, session.run_dir


def run_replay(run_dir) -> int:
    FastmonApp(ReplaySource(run_dir)).run()
    return 0


def run_watch(run_dir) -> int:
    """The dashboard of a run another fastmon records (headless), followed live; quitting it
    leaves that run alone. A run that has ended opens as its replay."""
    source = FollowSource(run_dir)
    FastmonApp(source if source.following else ReplaySource(run_dir)).run()
    return 0
