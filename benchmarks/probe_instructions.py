"""Machine instructions an untimed step costs under the probe, counted by valgrind: what
loop.py's steps execute with the probe installed (`probe_parts.py --variant notime
--no-publisher`: no step timed after the start, the publisher's thread stopped) minus what
they execute bare, per step. A count does not move with the machine's speed, so it sees
what bytecode counts (probe_bytecodes.py) cannot: torch's own code running slower paths
because of the probe (an instance whose ``__dict__`` the probe touched loses CPython's
specialized method calls, for instance), where an A/B's noise is several µs. Each side
runs at two lengths and the difference is taken, so start-up cancels. Left out: OpenBLAS's
spinning threads (``blas_thread_server``) and glibc's malloc, whose counts swing by
thousands a step with the heap's layout. Two runs of one command count alike (the bare
loop runs twice: the "bare again" column), but the probed process lays out memory
differently, and CPython's lookup caches hash by address: its dict lookups and type-cache
misses (``_Py_dict_lookup``, ``find_name_in_mro``, pybind11's type cache) move by a few
thousand a step from one probed run to the next. Read the functions, not the total: one
that is not of that kind and differs is the probe's (``_PyLong_AsByteArray`` and getargs
are the step ends logged at exit, the publisher being stopped). Cache misses, what a cold
step pays most, are not in it.

    python benchmarks/probe_instructions.py [--top 25] [loop.py options, default --width 64 --batch 32]

Needs valgrind (cachegrind); ~6 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHORT, LONG = 200, 1200  # steps; the per-step figure is over the LONG - SHORT between them
WARMUP = 100
EXCLUDED = r"blas_thread_server|^malloc\.c:|^arena\.c:"


def cachegrind(out: Path, command: list[str]) -> Path:
    subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}", *command],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, PYTHONHASHSEED="0"))
    return out


def per_function(path: Path) -> dict[str, int]:
    """Instructions by function (file:function) in a cachegrind output file."""
    counts: dict[str, int] = {}
    names = {}
    function_file = file = function = ""  # fl= names a function's file; fi=/fe= what is inlined into it
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("fl="):
            function_file = file = line[3:]
        elif line.startswith(("fi=", "fe=")):
            file = line[3:]
        elif line.startswith("fn="):
            function, file = line[3:], function_file
        elif line and line[0].isdigit():
            key = names.setdefault((file, function), f"{file.rsplit('/', 1)[-1]}:{function}")
            counts[key] = counts.get(key, 0) + int(line.split()[1])
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=25, help="functions to list by their difference")
    args, loop_args = parser.parse_known_args()
    loop_args = loop_args or ["--width", "64", "--batch", "32"]
    python = os.path.realpath(sys.executable)  # valgrind must see python itself, not a shim
    work = Path(tempfile.mkdtemp(prefix="fastmon-instructions-"))
    runs = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for side, head in (("bare", [python, str(HERE / "loop.py")]), ("bare again", [python, str(HERE / "loop.py")]),
                           ("probed", [python, "-m", "fastmon.probe", str(HERE / "probe_parts.py"),
                                       "--variant", "notime", "--no-publisher"])):
            for steps in (SHORT, LONG):
                command = [*head, *loop_args, "--steps", str(steps), "--warmup", str(WARMUP)]
                runs[side, steps] = pool.submit(cachegrind, work / f"{side.replace(' ', '_')}.{steps}", command)
        counts = {key: per_function(future.result()) for key, future in runs.items()}
    steps = LONG - SHORT

    def per_step(side: str) -> dict[str, float]:
        long, short = counts[side, LONG], counts[side, SHORT]
        return {name: (long.get(name, 0) - short.get(name, 0)) / steps
                for name in long.keys() | short.keys() if not re.search(EXCLUDED, name)}

    def minus(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        return {name: a.get(name, 0) - b.get(name, 0) for name in a.keys() | b.keys()}

    bare = per_step("bare")
    added, spread = minus(per_step("probed"), bare), minus(per_step("bare again"), bare)
    print(f"loop.py {' '.join(loop_args)}: machine instructions a step ({EXCLUDED} left out)")
    print(f"bare {sum(bare.values()):,.0f}; the probe (untimed steps) adds {sum(added.values()):+,.0f}; "
          f"bare again: {sum(spread.values()):+,.0f} (the method's spread)")
    print(f"{'probed':>10} {'bare again':>10}  function")
    for name, value in sorted(added.items(), key=lambda item: -abs(item[1]))[:args.top]:
        print(f"{value:+10,.0f} {spread.get(name, 0):+10,.0f}  {name}")


if __name__ == "__main__":
    main()
