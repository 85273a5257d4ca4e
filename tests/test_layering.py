"""Each package imports only what its docstring allows (checked in fresh interpreters)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# What each package may import besides the standard library: the whole allow-list. A new
# dependency between packages is a decision, made here.
MONITOR = {"fastmon", "fastmon.advisor", "fastmon.phases", "fastmon.records", "fastmon.report", "fastmon.session",
           "fastmon.summary", "fastmon.step_table", "fastmon.trace_export", "fastmon.verdicts", "fastmon.headless",
           "fastmon.progress", "fastmon.live_state", "fastmon.printed_loss", "fastmon.permanent"}
ALLOWED = {
    # pure rules over windows and facts: testable without torch, a GPU or a screen
    "advisor": {"fastmon.advisor", "fastmon.phases"},
    # inside the training: torch, and the few monitor modules that share its formats
    "probe": {"torch", "fastmon", "fastmon.probe", "fastmon.phases", "fastmon.step_events", "fastmon.sample_count",
              "fastmon.calibration"},
    # the dashboard: textual over the monitor's view; never torch
    "tui": {"textual", "textual_plotext", "rich", "fastmon.tui", *MONITOR},
    # the monitor: the command line, the session, the record, the reports; torch and the
    # trackers only inside the functions that need them (checked in fresh interpreters below)
    "fastmon": {"psutil", "pynvml", "torch", "wandb", "mlflow", "fastmon.tui", "fastmon.examples", "fastmon.probe",
                *MONITOR, *(f"fastmon.{p.stem}" for p in (ROOT / "fastmon").glob("*.py"))},
}


def imports_of(folder: str) -> dict[str, set[str]]:
    """Each module outside the standard library that the folder's files import -> the files."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] not in sys.stdlib_module_names and parts[0] != "__future__":
                    key = ".".join(parts[:2]) if parts[0] == "fastmon" else parts[0]
                    found.setdefault(key, set()).add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_what_it_is_allowed(package):
    stray = {name: sorted(files) for name, files in imports_of(package).items() if name not in ALLOWED[package]}
    assert not stray, f"{package}/ imports outside its allow-list: {stray}"


def test_the_allow_list_holds_the_rules_the_docstrings_state():
    assert not {"torch", "textual", "rich", "fastmon.probe", "fastmon.tui"} & ALLOWED["advisor"]
    assert not {"textual", "rich", "fastmon.tui", "fastmon.advisor", "fastmon.session"} & ALLOWED["probe"]
    assert not {"torch", "fastmon.probe"} & ALLOWED["tui"]
    assert "textual" not in ALLOWED["fastmon"] and "rich" not in ALLOWED["fastmon"]


@pytest.mark.parametrize("module, forbidden", [
    ("fastmon.advisor", "torch"),
    ("fastmon.tui.app", "torch"),
    ("fastmon.cli", "torch"),
    ("fastmon.session", "torch"),
    ("fastmon.probe", "torch"),  # importing the probe package installs nothing and loads no torch
])
@pytest.mark.e2e
def test_importing_has_no_heavy_side_effects(module, forbidden):
    code = f"import sys, {module}; print({forbidden!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.e2e
def test_importing_the_probe_patches_nothing():
    code = ("import torch, torch.utils.data.dataloader as dl; before = dl._BaseDataLoaderIter.__next__; "
            "b2 = torch.autograd.backward; import fastmon.probe, fastmon.probe.runtime; "
            "print(dl._BaseDataLoaderIter.__next__ is before and torch.autograd.backward is b2)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


# torch's private parts that change between releases: read only through probe/torch_private.py
VERSION_SENSITIVE = ("is_python_function", "kineto_results", "_len_torch_dispatch_stack", "_profiler_enabled",
                     "_is_profiler_enabled", "_pattern_matcher", "_foreach_norm", "_global_optimizer_",
                     "_get_current_dispatch_mode", "_python_dispatch")


def test_torchs_version_sensitive_private_parts_are_read_in_one_guarded_place():
    found = {(str(path.relative_to(ROOT)), name) for folder in ("probe", "fastmon") for path in (ROOT / folder).rglob("*.py")
             if path.name != "torch_private.py" for name in VERSION_SENSITIVE if name in path.read_text()}
    assert not found, f"read them through fastmon.probe.torch_private: {sorted(found)}"


def test_a_torch_without_a_private_part_is_named_and_the_probe_falls_back(monkeypatch):
    import torch

    from fastmon.probe.code_checks import total_norm
    from fastmon.probe.torch_private import missing

    grads = [torch.full((3,), 2.0), torch.full((4,), 1.0)]
    before = [line.split(":")[0] for line in missing()]  # torch 2.11 lacks _KinetoEvent.is_python_function
    assert "torch._foreach_norm" not in before
    monkeypatch.setattr(torch, "_foreach_norm", None)  # as a torch without it reads
    assert sorted(line.split(":")[0] for line in missing()) == sorted(["torch._foreach_norm", *before])
    assert total_norm(grads).item() == pytest.approx((3 * 4.0 + 4 * 1.0) ** 0.5)


def test_doctor_says_what_this_torch_lacks_and_what_goes_unmeasured(monkeypatch):
    import torch

    from fastmon.doctor import report
    from fastmon.probe.torch_private import missing

    if not missing():
        assert "✓ torch's private parts fastmon reads: all present" in report()
    monkeypatch.setattr(torch, "_foreach_norm", None)
    lines = report().splitlines()
    at = lines.index("  ✗ torch's private parts fastmon reads: this torch lacks")
    assert ("      torch._foreach_norm: gradient norms are taken one tensor at a time "
            "(slower on small models)") in lines[at + 1:]
