"""`fastmon watch` on a run another monitor records: a and d reach that monitor, under the
run's own --apply (docs/attach.md, docs/dashboard.md)."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import EXAMPLES, clean_env, fastmon_cmd, run_dirs, wait_for
from fastmon.records import RunRecord
from fastmon.tui.snapshot import FollowSource
from fastmon.watch_link import WatchLink

STARVED = ["--epochs", "30"]  # long enough to be watched; stopped by the test


def headless(tmp_path, apply: str) -> subprocess.Popen:
    return subprocess.Popen(fastmon_cmd("run", "--headless", "--apply", apply, EXAMPLES / "starved.py", *STARVED),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())


def advice_of(run) -> dict:
    record = RunRecord(run)
    try:
        return {a["id"]: a for a in record.advice()}
    finally:
        record.close()


@pytest.mark.e2e
async def test_a_from_a_watch_applies_the_advice_in_the_run_it_watches(tmp_path):
    from fastmon.tui.app import FastmonApp
    from fastmon.tui.widgets.advice_list import AdviceList

    monitor = headless(tmp_path, "ask")
    try:
        run = wait_for(lambda: run_dirs(tmp_path) and run_dirs(tmp_path)[0], 60, "the run folder")
        wait_for(lambda: "dataloader.num_workers" in advice_of(run), 90, "the advice to add workers")
        app = FastmonApp(FollowSource(run))
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(1.5)
            advice = app.query_one(AdviceList)
            ids = [advice.get_option_at_index(i).id for i in range(advice.option_count)]
            advice.highlighted = ids.index("dataloader.num_workers")
            await pilot.press("a")
            await pilot.pause(1.0)
            await pilot.press("q")  # quitting the watch leaves the run and its trial going
        assert monitor.poll() is None
        status = wait_for(lambda: {advice_of(run)["dataloader.num_workers"]["status"]} - {"open"}, 60,
                          "the monitor to take the change")
        assert status <= {"applying", "kept", "reverted"}, status
    finally:
        monitor.terminate()
        monitor.wait(60)


@pytest.mark.e2e
def test_a_watch_of_a_run_started_with_apply_never_is_told_how_to_allow_it(tmp_path):
    monitor = headless(tmp_path, "never")
    try:
        run = wait_for(lambda: run_dirs(tmp_path) and run_dirs(tmp_path)[0], 60, "the run folder")
        wait_for(lambda: "dataloader.num_workers" in advice_of(run), 90, "the advice to add workers")
        link = FollowSource(run).commands
        refused = link.apply("dataloader.num_workers")
        assert "--apply never" in refused and "--apply ask" in refused
        assert advice_of(run)["dataloader.num_workers"]["status"] == "open"
        # the run's secret, and nothing else, lets a watch in
        stranger = WatchLink(link.channel, "0" * 32).apply("dataloader.num_workers")
        assert "without an answer" in stranger
        assert link.dismiss("dataloader.num_workers") is None
        wait_for(lambda: advice_of(run)["dataloader.num_workers"]["status"] == "dismissed", 30, "the dismissal")
    finally:
        monitor.terminate()
        monitor.wait(60)


@pytest.mark.e2e
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="becoming another user needs root")
def test_another_user_can_neither_watch_a_run_nor_command_it(tmp_path):
    # A forked child becomes `nobody` (not root: the kernel's permission checks apply) and
    # tries what a stranger on the node would: fastmon watch on the run, and the run's
    # socket, secret in hand. Forked, not started: nobody cannot run this python at all.
    import io
    import json
    import sys

    import fastmon.cli
    import fastmon.tui.launch  # noqa: F401  (imported before the user changes: its files are root's)

    monitor = headless(tmp_path, "ask")
    try:
        run = wait_for(lambda: run_dirs(tmp_path) and run_dirs(tmp_path)[0], 60, "the run folder")
        wait_for(lambda: "dataloader.num_workers" in advice_of(run), 90, "the advice to add workers")
        link = FollowSource(run).commands
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.close(read)
                os.setgid(65534)
                os.setuid(65534)
                sys.stderr = said = io.StringIO()
                code = fastmon.cli.main(["watch", str(run)])
                answer = WatchLink(link.channel, link.secret).apply("dataloader.num_workers")
                os.write(write, json.dumps({"code": code, "said": said.getvalue(), "answer": answer}).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            seen = json.loads(pipe.read())
        os.waitpid(child, 0)
        assert seen["code"] == fastmon.cli.EXIT_NOT_YOURS
        assert "permission denied" in seen["said"] and "Traceback" not in seen["said"]
        assert "cannot be reached (Permission denied)" in seen["answer"]
        assert advice_of(run)["dataloader.num_workers"]["status"] == "open"
    finally:
        monitor.terminate()
        monitor.wait(60)
