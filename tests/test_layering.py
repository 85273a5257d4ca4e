"""Each package imports only what its docstring allows (checked in fresh interpreters)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imports_of(folder: str) -> set[str]:
    found = set()
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
    return found


def top(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def test_advisor_imports_neither_torch_nor_textual_nor_the_probe():
    names = imports_of("advisor")
    assert not top(names) & {"torch", "textual", "textual_plotext", "numpy"}
    assert not {n for n in names if n.startswith(("fastmon.probe", "fastmon.tui", "fastmon.session"))}


def test_probe_never_imports_textual_or_the_advisor():
    names = imports_of("probe")
    assert not top(names) & {"textual", "textual_plotext", "rich"}
    assert not {n for n in names if n.startswith(("fastmon.tui", "fastmon.advisor", "fastmon.session"))}


def test_tui_never_imports_torch_or_the_probe_hooks():
    names = imports_of("tui")
    assert "torch" not in top(names)
    assert not {n for n in names if n.startswith("fastmon.probe")}


@pytest.mark.parametrize("module, forbidden", [
    ("fastmon.advisor", "torch"),
    ("fastmon.tui.app", "torch"),
    ("fastmon.cli", "torch"),
    ("fastmon.session", "torch"),
    ("fastmon.probe", "torch"),  # importing the probe package installs nothing and loads no torch
])
def test_importing_has_no_heavy_side_effects(module, forbidden):
    code = f"import sys, {module}; print({forbidden!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_the_probe_patches_nothing():
    code = ("import torch, torch.utils.data.dataloader as dl; before = dl._BaseDataLoaderIter.__next__; "
            "b2 = torch.autograd.backward; import fastmon.probe, fastmon.probe.runtime; "
            "print(dl._BaseDataLoaderIter.__next__ is before and torch.autograd.backward is b2)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
