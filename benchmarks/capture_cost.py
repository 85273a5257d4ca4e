"""What a torch.profiler capture (`t`, `--profile-at`) costs the training: a conv net's
steps timed by the script itself under `fastmon run --headless --profile-at 20`, against
the median step before the capture: the captured steps, the step that stops the
profiler, and the steps until the findings (trace, operator table, torch's matchers) are
reported, which the training shares its process with.

    python benchmarks/capture_cost.py        # writes benchmarks/results/capture_cost.md
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIRST, STEPS = 20, 5

CONV_LOOP = textwrap.dedent("""
    import time, torch
    from torch import nn
    torch.manual_seed(0)
    layers = []
    for _ in range(12):
        layers += [nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU()]
    model = nn.Sequential(*layers)
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 32, 32, 32)
    last = time.perf_counter()
    for step in range(60):
        optimizer.zero_grad()
        model(x).mean().backward()
        optimizer.step()
        now = time.perf_counter()
        print(f"step {step} {(now - last) * 1e3:.1f}", flush=True)
        last = now
""")


def main() -> None:
    with tempfile.TemporaryDirectory() as cwd:
        script = Path(cwd) / "conv_loop.py"
        script.write_text(CONV_LOOP)
        out = subprocess.run([sys.executable, "-m", "fastmon", "run", "--headless", "--profile-at", str(FIRST),
                              "--profile-steps", str(STEPS), str(script)], cwd=cwd, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        report = subprocess.run([sys.executable, "-m", "fastmon", "report", "--json"], cwd=cwd, capture_output=True,
                                text=True, timeout=120)
        [capture] = json.loads(report.stdout)["profiles"]
    ms = {int(line.split()[1]): float(line.split()[2]) for line in out.stdout.splitlines() if line.startswith("step ")}
    before = statistics.median(ms[s] for s in range(5, FIRST))
    captured = [ms[s] for s in range(FIRST, FIRST + STEPS - 1)]
    stop = ms[FIRST + STEPS - 1]  # the profiler stops at this step's end
    reported = capture["step"]  # the step in progress when the findings were sent
    building = [ms[s] for s in range(FIRST + STEPS, reported + 1)]
    lines = [
        f"# torch.profiler capture cost — {datetime.date.today()} — {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}", "",
        f"A conv net (12 x Conv2d 32->32 + BatchNorm + ReLU, batch 8 at 32x32, Adam), `--profile-at {FIRST} "
        f"--profile-steps {STEPS}`, each step's wall time printed by the script.", "",
        "| | ms |", "| --- | ---: |",
        f"| median step before the capture | {before:.0f} |",
        f"| captured steps (median, {len(captured)} steps) | {statistics.median(captured):.0f} "
        f"({statistics.median(captured) / before:.2f}x) |",
        f"| the step whose end stops the profiler | {stop:.0f} (+{stop - before:.0f}) |",
        f"| steps {FIRST + STEPS}-{reported}, while the findings are built | {sum(building):.0f} in all "
        f"(+{sum(building) - before * len(building):.0f}) |", "",
        "Reproduce: `python benchmarks/capture_cost.py`",
    ]
    print("\n".join(lines))
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "capture_cost.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
