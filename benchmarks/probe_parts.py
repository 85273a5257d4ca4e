"""loop.py under the probe with part of the probe's per-step work taken out, to tell where
an A/B's difference goes (run it under `fastmon run --headless`; loop.py's own options
pass through, --ab-pairs included):

    full     the probe as it is
    notime   no step is timed after the first TIMED_FROM: what is left is the untimed
             steps' hook (and the samples that come due in it)
    nohook   as notime, and from then on the optimizer's post hook does nothing: what is
             left is torch calling one Python hook, and the patches that stay in

With --hook-time (a plain run, no A/B), the post hook's own time is measured in place
instead (a perf_counter_ns either side of it, printed at exit; with --variant nohook the
same around the empty hook: the measurement's own cost): what the hook costs cold,
between a real step's kernels, where a warm timeit loop reads a fraction of it.

    fastmon run --headless benchmarks/probe_parts.py --variant notime --width 8 --batch 4 --no-loader --ab-pairs 3000
    fastmon run --headless benchmarks/probe_parts.py --hook-time --width 420 --batch 224 --steps 3000
"""

from __future__ import annotations

import argparse
import atexit
import runpy
import statistics
import sys
from pathlib import Path
from time import perf_counter_ns

import torch.optim.optimizer as optim_module

from fastmon.probe.runtime import current

TIMED_FROM = 60  # the probe's fully timed start (sampling.TIME_ALL_FIRST) and its discovery are over by then
HOOK_TIMES_FROM = 600  # --hook-time leaves out the steps before this: the start, and its schedule settling
LOOP = Path(__file__).resolve().parent / "loop.py"

parser = argparse.ArgumentParser()
parser.add_argument("--variant", choices=("full", "notime", "nohook"), default="full")
parser.add_argument("--hook-time", action="store_true")
parser.add_argument("--no-publisher", action="store_true",
                    help="stop the publisher's thread (probe_instructions.py: under valgrind its rounds come every few steps)")
args, loop_args = parser.parse_known_args()

probe = current()
if probe is None:
    raise SystemExit("run this under `fastmon run`")
if args.no_publisher:
    probe.publisher._stop.set()
part = probe.optimizer_part
hooks = optim_module._global_optimizer_post_hooks


def empty_hook(optimizer, hook_args, hook_kwargs):
    return None


if args.hook_time and "--ab-pairs" in loop_args:
    parser.error("--hook-time measures a plain run: the A/B's resumes put a new hook in")
in_place = [hooks[part.post_handle.id]]  # the hook --hook-time calls, the probe's until replaced
hook_replaced = False


def replace_hook() -> None:
    """Put the empty hook in the probe's post hook's place (again after a resume)."""
    global hook_replaced
    hook_replaced = True
    if args.hook_time:
        in_place[0] = empty_hook
    else:
        hooks[part.post_handle.id] = empty_hook


if args.variant != "full":
    gap = probe.schedule.gap

    def no_more_timing(step: int, now_ns: int) -> int:
        if step < TIMED_FROM:
            return gap(step, now_ns)
        if args.variant == "nohook":
            replace_hook()  # the clock stops here: nothing is due after this step
        return 1 << 40

    probe.schedule.gap = no_more_timing
    install = part.install

    def install_again() -> None:
        install()
        if hook_replaced:
            replace_hook()

    part.install = install_again

if args.hook_time:
    hook_ns: list[int] = []

    def timed_hook(optimizer, hook_args, hook_kwargs):
        started = perf_counter_ns()
        in_place[0](optimizer, hook_args, hook_kwargs)
        hook_ns.append(perf_counter_ns() - started)

    hooks[part.post_handle.id] = timed_hook

    @atexit.register
    def show_hook_time() -> None:
        kept = sorted(hook_ns[HOOK_TIMES_FROM:])
        if kept:
            print(f"hook_ns {args.variant} steps {len(kept)} median {kept[len(kept) // 2]} "
                  f"mean {statistics.mean(kept[:int(len(kept) * 0.99)]):.0f} (slowest 1% left out)", file=sys.stderr)


sys.argv = [str(LOOP), *loop_args]
sys.path.insert(0, str(LOOP.parent))
runpy.run_path(str(LOOP), run_name="__main__")
