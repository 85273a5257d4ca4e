"""Helpers that run the real `fastmon` command on real scripts, in a temporary folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
EXAMPLES = ROOT / "examples"


def fastmon_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "fastmon", *map(str, args)]


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMON_")}
    env.update(extra)
    return env


@pytest.fixture(autouse=True)
def processes_only_in_e2e(request, monkeypatch):
    """`pytest -m "not e2e"` is the fast loop: a test that starts a process (a training
    run, fastmon itself) and is not marked e2e fails, saying so."""
    if request.node.get_closest_marker("e2e") is None:
        def refuse(*args, **kwargs):
            raise AssertionError(f"{request.node.nodeid} starts a process: mark it @pytest.mark.e2e")

        monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture
def run_fastmon(tmp_path):
    """Runs `fastmon ARGS` in tmp_path; returns the CompletedProcess."""

    def run(*args, timeout: float = 240, env_extra: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(fastmon_cmd(*args), cwd=tmp_path, capture_output=True, text=True,
                              timeout=timeout, env=clean_env(**(env_extra or {})), stdin=subprocess.DEVNULL, **kwargs)

    return run


@pytest.fixture
def report(tmp_path):
    """`fastmon report --json` of the latest run in tmp_path, as a dict."""

    def get(run: str = "latest") -> dict:
        out = subprocess.run(fastmon_cmd("report", run, "--json"), cwd=tmp_path, capture_output=True, text=True,
                             timeout=60, env=clean_env())
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    return get


def advised_for_the_code(advice: list[dict]) -> list[str]:
    """The problems advised about the script's own code: torch.num_threads is advice about
    the machine (another job holding a core while the test ran), right where it fires."""
    return [a["id"] for a in advice if a.get("kind", "problem") == "problem" and a["id"] != "torch.num_threads"]


def wait_for(predicate, timeout: float, what: str):
    """``predicate()``'s first true value within ``timeout`` seconds; else the test fails
    naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def run_dirs(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "fastmon-runs").glob("*"))


def shared_auto_run(tmp_path_factory, example: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`fastmon run --headless --apply auto EXAMPLE ARGS` on a copy of the example in a
    folder of its own: (the CompletedProcess, the folder)."""
    import shutil

    folder = tmp_path_factory.mktemp(Path(example).stem)
    shutil.copy(EXAMPLES / example, folder)
    out = subprocess.run(fastmon_cmd("run", "--headless", "--apply", "auto", example, *args), cwd=folder,
                         capture_output=True, text=True, timeout=400, env=clean_env(), stdin=subprocess.DEVNULL)
    return out, folder


@pytest.fixture(scope="session")
def mistakes_auto(tmp_path_factory):
    """One auto run of mistakes.py, shared by the tests that read it (its advice, its
    trials' claims, its patch). 10 epochs: room for a trial extended to its last pair
    (~13 s) on a noisy machine."""
    return shared_auto_run(tmp_path_factory, "mistakes.py", "--epochs", "10")


@pytest.fixture(scope="session")
def starved_auto(tmp_path_factory):
    """One auto run of the demo's starved.py, 8 epochs, each epoch's sample indices
    recorded (indices.txt in its folder), shared by the tests that read it."""
    return shared_auto_run(tmp_path_factory, "starved.py", "--epochs", "8", "--record-indices", "indices.txt")
