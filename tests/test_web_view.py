"""`fastmon watch --web`: the dashboard in a real headless browser, behind its token
(docs/attach.md). The browser is npm's @sparticuz/chromium driven by puppeteer-core,
installed by .ci/run into BROWSER_DIR; without it the browser test skips, saying how to
run it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, SCRIPTS, clean_env, fastmon_cmd, run_dirs, wait_for

BROWSER_DIR = Path(os.environ.get("FASTMON_BROWSER_DIR", Path.home() / ".cache" / "fastmon-browser"))
INSTALL = f"npm install --prefix {BROWSER_DIR} @sparticuz/chromium puppeteer-core"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError:
        return 0  # not listening (yet)


@pytest.fixture
def served(tmp_path):
    """A headless run, and `fastmon watch --web` serving it: (the URL with its token, the run)."""
    run = subprocess.Popen(fastmon_cmd("run", "--headless", SCRIPTS / "slow_steps.py", "--steps", "100000",
                                       "--step-ms", "20"),
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
    web = None
    try:
        folder = wait_for(lambda: run_dirs(tmp_path) and run_dirs(tmp_path)[0], 60, "the run folder")
        port = free_port()
        web = subprocess.Popen(fastmon_cmd("watch", "--web", "--port", port, folder), cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=clean_env())
        line = web.stderr.readline()
        assert "in a browser: http://localhost:" in line, line
        url = line.split("in a browser: ")[1].strip()
        wait_for(lambda: status_of(url) == 200, 30, "the web view to serve")
        yield url, folder
    finally:
        for process in (web, run):
            if process is not None:
                process.terminate()
                process.wait(60)


@pytest.mark.e2e
def test_the_web_view_refuses_a_request_without_its_token(served):
    url, _ = served
    base = url.split("?")[0]
    assert status_of(base) == 403
    assert status_of(base + "?token=" + "x" * 32) == 403
    assert status_of(base.rstrip("/") + "/static/js/textual.js") == 403  # the static files too
    request = urllib.request.Request(base.rstrip("/") + "/ws?" + url.split("?")[1],
                                     headers={"Origin": "http://evil.example", "Connection": "Upgrade",
                                              "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                                              "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    try:
        urllib.request.urlopen(request, timeout=10)
        refused = None
    except urllib.error.HTTPError as exc:
        refused = exc.code
    assert refused == 403  # a page of another origin may not drive it, token or not


@pytest.mark.e2e
def test_the_web_view_shows_a_live_run_in_a_real_browser(served):
    if not (BROWSER_DIR / "node_modules" / "puppeteer-core").is_dir() or not shutil.which("node"):
        pytest.skip(f"no headless browser in {BROWSER_DIR}: `{INSTALL}`, then run this test again")
    url, _ = served
    shutil.copy(ROOT / "tests" / "browser" / "web_view.mjs", BROWSER_DIR / "web_view.mjs")
    out = subprocess.run(["node", str(BROWSER_DIR / "web_view.mjs"), url], capture_output=True, text=True,
                         timeout=240, cwd=BROWSER_DIR)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["status"] == 200
    assert seen["header"], "the dashboard's header never showed"
    assert seen["later"] > seen["first"] > 0, seen  # followed live: the step count rose
    assert seen["help"], "the ? key never reached the app"


def test_watch_names_the_options_of_web_alone(tmp_path, capsys):
    from fastmon.cli import EXIT_USAGE, main

    assert main(["watch", "--port", "9000", "--runs-dir", str(tmp_path)]) == EXIT_USAGE
    for port in ("99999", "0", "http"):
        with pytest.raises(SystemExit) as exc:
            main(["watch", "--web", "--port", port, "--runs-dir", str(tmp_path)])
        assert exc.value.code == EXIT_USAGE
        assert "is not a port (1 to 65535)" in capsys.readouterr().err


@pytest.mark.e2e
def test_a_port_taken_is_said_before_any_url_and_nothing_starts(tmp_path):
    from fastmon.cli import EXIT_NO_SERVICE

    with socket.create_server(("localhost", 0)) as taken:
        port = taken.getsockname()[1]
        out = subprocess.run(fastmon_cmd("run", "--web", "--web-port", port, SCRIPTS / "slow_steps.py", "--steps", "5"),
                             cwd=tmp_path, capture_output=True, text=True, timeout=120, env=clean_env())
        assert out.returncode == EXIT_NO_SERVICE, out.stderr
        assert "--web-port names another" in out.stderr and "nothing started" in out.stderr
        assert not run_dirs(tmp_path)
        (tmp_path / "fastmon-runs" / "a-run").mkdir(parents=True)
        (tmp_path / "fastmon-runs" / "a-run" / "run.sqlite").touch()
        out = subprocess.run(fastmon_cmd("watch", "--web", "--port", port, "fastmon-runs/a-run"), cwd=tmp_path,
                             capture_output=True, text=True, timeout=120, env=clean_env())
        assert out.returncode == EXIT_NO_SERVICE
        assert "token=" not in out.stderr and "--port names another" in out.stderr


@pytest.mark.e2e
def test_fastmon_run_web_serves_the_run_while_it_lasts(tmp_path):
    port = free_port()
    run = subprocess.Popen(fastmon_cmd("run", "--web", "--web-port", port, SCRIPTS / "slow_steps.py", "--steps", "150",
                                       "--step-ms", "20"),
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        url = wait_for(lambda: next((line.split("in a browser: ")[1].strip() for line in iter(run.stderr.readline, "")
                                     if "in a browser: " in line), None), 60, "the URL")
        assert url.startswith(f"http://localhost:{port}/?token=")
        wait_for(lambda: status_of(url) == 200, 30, "the web view to serve")
        assert run.wait(120) == 0
    finally:
        run.kill()
        run.wait(60)
    wait_for(lambda: status_of(url) == 0, 15, "the web view to end with the run")
