"""Refresh docs/demo.svg, the README's picture: the demo's end screen at 120x40, saved by
the dashboard's own `s` key (~30 s):

    python docs/screenshot.py
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from fastmon.common.run_status import RunStatus
from fastmon.session import RunOptions, Session
from fastmon.tui.app import FastmonApp
from fastmon.tui.snapshot import LiveSource

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "demo.svg"
SIZE = (120, 40)
EPOCHS = "10"  # the demo's own: both of its changes measured


async def end_screen(runs_dir: str) -> Path:
    session = Session(RunOptions(target=["examples/starved.py", "--epochs", EPOCHS], apply="auto",
                                 runs_dir=runs_dir))
    session.start()
    try:
        app = FastmonApp(LiveSource(session), session=session)
        async with app.run_test(size=SIZE) as pilot:
            deadline = time.monotonic() + 300
            while not (app.snapshot is not None and app.snapshot.status == RunStatus.FINISHED):
                if time.monotonic() > deadline:
                    sys.exit("the demo did not finish in 5 minutes")
                await pilot.pause(0.5)
            await pilot.pause(1.0)  # the end screen's last redraw
            await pilot.press("s")
            await pilot.pause(0.5)
            await pilot.press("q")
    finally:
        session.terminate()
        session.wait()
    (saved,) = Path(session.run_dir).glob("screen-*.svg")
    return saved


def main() -> None:
    os.chdir(ROOT)  # the script named as a user in the repository would name it
    with tempfile.TemporaryDirectory() as runs_dir:
        saved = asyncio.run(end_screen(runs_dir))
        shutil.copyfile(saved, OUT)
    OUT.chmod(0o644)  # a file of the repository, unlike the run folder's
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
