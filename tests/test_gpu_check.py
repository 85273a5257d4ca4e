"""benchmarks/gpu_check.py runs everywhere: on a machine without CUDA every check says skipped."""

import subprocess
import sys

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_check import CHECKS  # noqa: E402


@pytest.mark.e2e
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the checks really run (minutes): run it by hand")
def test_gpu_check_skips_every_check_without_cuda(tmp_path):
    out = subprocess.run([sys.executable, ROOT / "benchmarks" / "gpu_check.py", "--out", tmp_path],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.strip().startswith("skipped")]
    assert len(lines) == len(CHECKS) and all("no CUDA device" in line for line in lines)
    assert f"0 passed, 0 failed, {len(CHECKS)} skipped on no GPU" in out.stdout
    assert list(tmp_path.glob("gpu_check-*.md")) and list(tmp_path.glob("gpu_check-*.json"))


def test_the_checks_fall_in_two_groups_that_each_fit_in_five_minutes():
    from gpu_check import GROUPS

    grouped = [check for group in GROUPS.values() for check in group]
    assert sorted(grouped) == sorted(CHECKS)  # each check in exactly one group
    assert all(sum(group.values()) < 300 for group in GROUPS.values())


@pytest.mark.e2e
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the checks really run (minutes): run it by hand")
def test_a_group_runs_only_its_checks_and_says_its_expected_time():
    from gpu_check import GROUPS

    out = subprocess.run([sys.executable, ROOT / "benchmarks" / "gpu_check.py", "--group", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ran = [line.split()[1] for line in out.stdout.splitlines() if line.strip().startswith("skipped")]
    assert ran == list(GROUPS[2])
    assert out.stdout.startswith(f"{len(GROUPS[2])} checks, expected ~{sum(GROUPS[2].values()) / 60:.1f} min")
