"""Each package imports only what its docstring allows (checked in fresh interpreters)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# What each package may import besides the standard library: the whole allow-list. A new
# dependency between packages is a decision, made here.
MONITOR = {"fastmon", "fastmon.advisor", "fastmon.common", "fastmon.records", "fastmon.report", "fastmon.session",
           "fastmon.summary", "fastmon.step_table", "fastmon.trace_export", "fastmon.headless", "fastmon.progress",
           "fastmon.live_state", "fastmon.printed_loss", "fastmon.permanent", "fastmon.rederive", "fastmon.pipeline",
           "fastmon.watch_link"}
ALLOWED = {
    # the shared vocabulary (phases, wire format, step events, verdict words): imports no other folder
    "common": {"fastmon.common"},
    # pure rules over windows and facts: testable without torch, a GPU or a screen
    "advisor": {"fastmon.advisor", "fastmon.common"},
    # inside the training: torch, the vocabulary, and the package itself (its folder, for
    # telling fastmon's frames from the script's)
    "probe": {"torch", "fastmon", "fastmon.probe", "fastmon.common"},
    # the dashboard: textual over the monitor's view; never torch
    "tui": {"textual", "textual_plotext", "rich", "fastmon.tui", *MONITOR},
    # the monitor: the command line, the session, the record, the reports; torch and the
    # trackers only inside the functions that need them (checked in fresh interpreters below)
    "fastmon": {"psutil", "pynvml", "torch", "wandb", "mlflow", "prometheus_client", "aiohttp", "textual_serve",
                "fastmon.tui", "fastmon.examples",
                "fastmon.probe",
                *MONITOR, *(f"fastmon.{p.stem}" for p in (ROOT / "fastmon").glob("*.py"))},
}


PACKAGE_DIRS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def is_module(name: str) -> bool:
    """Whether ``name`` (fastmon.x.y) is one of fastmon's modules or packages, found through
    pyproject's package-dir mapping as the installed package finds it."""
    package, _, rest = name.rpartition(".")
    folder = PACKAGE_DIRS.get(package)
    if folder is not None:
        return (ROOT / folder / f"{rest}.py").is_file() or name in PACKAGE_DIRS
    return name in PACKAGE_DIRS


def names_imported(node: ast.AST) -> list[str]:
    """The modules an import statement really names: ``from fastmon import session``
    imports the module fastmon.session, not the package fastmon."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [f"{node.module}.{alias.name}" if is_module(f"{node.module}.{alias.name}") else node.module
                for alias in node.names]
    return []


def imports_of(folder: Path) -> dict[str, set[str]]:
    """Each module outside the standard library that the folder's files import -> the files."""
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            for name in names_imported(node):
                parts = name.split(".")
                if parts[0] not in sys.stdlib_module_names and parts[0] != "__future__":
                    key = ".".join(parts[:2]) if parts[0] == "fastmon" else parts[0]
                    found.setdefault(key, set()).add(path.name)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_what_it_is_allowed(package):
    stray = {name: sorted(files) for name, files in imports_of(ROOT / package).items() if name not in ALLOWED[package]}
    assert not stray, f"{package}/ imports outside its allow-list: {stray}"


def test_an_import_of_a_module_by_from_its_package_is_caught(tmp_path):
    (tmp_path / "hooks.py").write_text("from fastmon import session, __version__\nfrom fastmon.tui import app\n")
    found = imports_of(tmp_path)
    assert {"fastmon.session", "fastmon", "fastmon.tui"} <= set(found)
    assert "fastmon.session" not in ALLOWED["probe"] and "fastmon.tui" not in ALLOWED["probe"]


def test_the_allow_list_holds_the_rules_the_docstrings_state():
    assert not {"torch", "textual", "rich", "fastmon.probe", "fastmon.tui"} & ALLOWED["advisor"]
    assert not {"textual", "rich", "fastmon.tui", "fastmon.advisor", "fastmon.session"} & ALLOWED["probe"]
    assert not {"torch", "fastmon.probe"} & ALLOWED["tui"]
    assert "textual" not in ALLOWED["fastmon"] and "rich" not in ALLOWED["fastmon"]
    assert ALLOWED["common"] == {"fastmon.common"}  # one way: every folder imports it, it imports none


@pytest.mark.parametrize("package", ["probe", "advisor"])
def test_the_package_docstring_names_what_it_may_import(package):
    import importlib

    doc = importlib.import_module(f"fastmon.{package}").__doc__
    named = {name for name in ALLOWED[package] if name.startswith("fastmon.") and name != f"fastmon.{package}"}
    assert all(f"``{name}``" in doc for name in named), (named, doc)


@pytest.mark.parametrize("module, forbidden", [
    ("fastmon.advisor", "torch"),
    ("fastmon.common", "torch"),
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
    from fastmon.probe.torch_private import missing

    from fastmon.doctor import report

    if not missing():
        assert "✓ torch's private parts fastmon reads: all present" in report()
    monkeypatch.setattr(torch, "_foreach_norm", None)
    lines = report().splitlines()
    at = lines.index("  ✗ torch's private parts fastmon reads: this torch lacks")
    assert ("      torch._foreach_norm: gradient norms are taken one tensor at a time "
            "(slower on small models)") in lines[at + 1:]


def relative_imports(source: str) -> list[str]:
    """The relative imports in a module's source (``from .. import session``): they would
    pass the allow-list above unseen, so none is allowed."""
    return [f"{'.' * node.level}{node.module or ''} import {', '.join(a.name for a in node.names)}"
            for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom) and node.level > 0]


def test_no_module_imports_relatively():
    assert relative_imports("from .. import session\nfrom fastmon.common import wire\n") == [".. import session"]
    found = {str(path.relative_to(ROOT)): relative_imports(path.read_text())
             for package in ALLOWED for path in (ROOT / package).rglob("*.py")}
    assert {path: imports for path, imports in found.items() if imports} == {}


@pytest.mark.e2e
@pytest.mark.parametrize("folder,planted", [
    ("probe", "import textual\nfrom fastmon import session\n"),
    ("advisor", "import torch\n"),
    ("tui", "from fastmon.probe import runtime\n"),
    ("common", "from fastmon.advisor import facts\n"),
])
def test_ruff_refuses_a_banned_import_planted_in_each_folder(tmp_path, folder, planted):
    import shutil

    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / folder).mkdir()
    shutil.copy(ROOT / folder / "ruff.toml", tmp_path / folder)
    (tmp_path / folder / "planted.py").write_text(planted + "from .. import session as relative\n")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout
    assert out.stdout.count("TID251") == planted.count("\n") and "TID252" in out.stdout, out.stdout


@pytest.mark.e2e
def test_ruff_passes_the_tree_as_it_is():
    clean = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert clean.returncode == 0, clean.stdout[-3000:]
