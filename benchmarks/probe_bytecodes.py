"""The probe's Python work per training step, counted: bytecodes executed and calls made
in fastmon's own code, per function, over the benchmark loop (loop.py). Unlike a timing,
the count is the same on every run and every machine, so it tracks the probe's cost
across changes even where timings are too noisy to.

    python benchmarks/probe_bytecodes.py [--steps 1000] [loop.py options]
"""

from __future__ import annotations

import argparse
import collections
import runpy
import sys
from pathlib import Path

import fastmon.probe

HERE = Path(__file__).resolve().parent
PROBE_FILES = str(Path(fastmon.probe.__file__).resolve().parent)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    args, loop_args = parser.parse_known_args()

    from fastmon.probe.runtime import install

    probe = install(None)
    opcodes: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()

    def trace(frame, event, arg):
        if not frame.f_code.co_filename.startswith(PROBE_FILES):
            return None
        frame.f_trace_opcodes = True
        name = frame.f_code.co_qualname
        if event == "call":
            calls[name] += 1
        elif event == "opcode":
            opcodes[name] += 1
        return trace

    sys.argv = [str(HERE / "loop.py"), "--steps", str(args.steps), "--warmup", "100", *loop_args]
    sys.settrace(trace)
    try:
        runpy.run_path(str(HERE / "loop.py"), run_name="__main__")
    finally:
        sys.settrace(None)
    steps = probe.clock.step
    print(f"{steps} steps: {sum(opcodes.values()) / steps:.0f} bytecodes and "
          f"{sum(calls.values()) / steps:.1f} calls of the probe's per step")
    for name, count in opcodes.most_common(15):
        print(f"  {count / steps:7.1f} bytecodes {calls[name] / steps:6.2f} calls  {name}")


if __name__ == "__main__":
    main()
