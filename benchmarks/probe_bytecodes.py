"""The probe's Python work per training step, counted: bytecodes executed and calls made
in fastmon's own code, per function, over the benchmark loop (loop.py), for a timed step
and for an untimed one (the probe times a random sample of short steps; see
fastmon/probe/sampling.py). Unlike a timing, the count is the same on every run and every
machine, so it tracks the probe's cost across changes even where timings are too noisy to.

    python benchmarks/probe_bytecodes.py [--steps 1000] [loop.py options]
"""

from __future__ import annotations

import argparse
import collections
import runpy
import subprocess
import sys
from pathlib import Path

import fastmon.probe

HERE = Path(__file__).resolve().parent
PROBE_FILES = str(Path(fastmon.probe.__file__).resolve().parent)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--untimed", action="store_true", help="count untimed steps (run by main() in a child)")
    args, loop_args = parser.parse_known_args()
    if not args.untimed:  # timed steps here, untimed ones in a child process of their own
        subprocess.run([sys.executable, __file__, "--untimed", "--steps", str(args.steps), *loop_args], check=True)

    from fastmon.probe.runtime import install

    probe = install(None)
    start = 150  # counted from this step on: the discovery and the run's fully timed start are over
    if args.untimed:
        probe.schedule.gap = lambda step, now_ns: 1 if step < start else 1 << 62
    else:
        probe.schedule.every_step = True
    opcodes: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()

    def trace(frame, event, arg):
        if not frame.f_code.co_filename.startswith(PROBE_FILES) or probe.clock.step < start:
            return None
        frame.f_trace_opcodes = True
        name = frame.f_code.co_qualname
        if event == "call":
            calls[name] += 1
        elif event == "opcode":
            opcodes[name] += 1
        return trace

    sys.argv = [str(HERE / "loop.py"), "--steps", str(args.steps), "--warmup", str(start), *loop_args]
    sys.settrace(trace)
    try:
        runpy.run_path(str(HERE / "loop.py"), run_name="__main__")
    finally:
        sys.settrace(None)
    steps = probe.clock.step - start
    kind = "untimed" if args.untimed else "timed"
    print(f"{steps} steps, {kind}: {sum(opcodes.values()) / steps:.0f} bytecodes and "
          f"{sum(calls.values()) / steps:.1f} calls of the probe's per step")
    for name, count in opcodes.most_common(15):
        print(f"  {count / steps:7.1f} bytecodes {calls[name] / steps:6.2f} calls  {name}")


if __name__ == "__main__":
    main()
