"""A plain `pip install .` (a wheel, not the editable install the tests run from) holds
every module and stylesheet of the source tree: a package missing from pyproject.toml
works in a checkout and fails on a user's machine."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# source folder -> where its files land in the installed fastmon package
LAYOUT = {"fastmon": "fastmon", "probe": "fastmon/probe", "advisor": "fastmon/advisor", "tui": "fastmon/tui",
          "examples": "fastmon/examples"}


@pytest.mark.e2e
def test_the_wheel_holds_every_module_and_stylesheet(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("fastmon-*.whl")
    packed = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"{target}/{path.relative_to(ROOT / folder).as_posix()}"
                for folder, target in LAYOUT.items()
                for path in (ROOT / folder).rglob("*") if path.suffix in (".py", ".tcss")}
    assert sorted(expected - packed) == []


def test_each_floor_pyproject_states_is_the_release_ci_tests():
    floors = {}
    for requirement in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        name, floor = re.match(r"([\w.-]+)>=([\w.]+)", requirement).groups()
        floors[name] = floor
    lines = (ROOT / ".ci" / "oldest.txt").read_text().splitlines()
    tested = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    assert tested == floors


def test_the_readme_opens_with_the_picture_the_two_commands_and_the_examples():
    text = (ROOT / "README.md").read_text()
    top = text.splitlines()[:40]
    (picture,) = [line for line in top if line.startswith("![")]
    assert (ROOT / picture.split("](", 1)[1].rstrip(")")).is_file()
    commands = [line.strip() for line in top if line.startswith("    pip install")]
    assert commands[0].endswith("&& fastmon demo") and commands[1].endswith("&& python -m pytest -q"), commands
    examples = text.split("## The examples\n", 1)[1].split("\n## ", 1)[0]
    for script in sorted((ROOT / "examples").glob("[!_]*.py")):
        assert f"`examples/{script.name}`" in examples, script.name
