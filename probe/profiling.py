"""One-shot torch.profiler capture: a few whole steps under ``torch.profiler``, started
and stopped at step boundaries in the training thread, on request (the dashboard's ``t``,
``fastmon run --profile-at STEP``).

The capture writes a Chrome trace beside the run record (one file per rank) and reports
the top operators by self time and what torch's own anti-pattern matcher ("TorchTidy", a
private API, read through ``torch_private``) finds, with the file:line in the user's code. The steps it covers run slower (the profiler records
every operator and Python frame): they stay in the record as they ran, and the event
names them. Everything after ``stop`` (the trace file, the tables) runs in a thread of
its own, so that the training goes on.
"""

from __future__ import annotations

import collections
import gzip
import math
import os
import shutil
import threading
import time
from pathlib import Path

import torch

from fastmon.probe.guard import describe
from fastmon.probe.torch_private import is_python_frame, kineto_events, pattern_matcher, profiler_running

TOP_OPS = 10
EXPORT_WAIT_S = 30.0  # at the script's exit: how long the last capture's files may still take
# torch's matchers, by class name; the ones about CUDA say nothing true of a CPU run (the
# TF32 one fires on any fp32 matmul, GPU or not).
PATTERNS = ["OptimizerSingleTensorPattern", "GradNotSetToNonePattern", "SynchronizedDataLoaderPattern",
            "Conv2dBiasFollowedByBatchNorm2dPattern"]
CUDA_PATTERNS = ["ExtraCUDACopyPattern", "FP32MatMulPattern", "MatMulDimInFP16Pattern"]
_PROBE_FILES = {path.name for path in Path(__file__).parent.glob("*.py")}


def requested_at_start() -> list[tuple[int, int]]:
    """``FASTMON_PROFILE=STEP:COUNT`` (set by ``fastmon run --profile-at``): the same step on every rank."""
    try:
        start, count = os.environ["FASTMON_PROFILE"].split(":")
        return [(int(start), max(1, int(count)))]
    except (KeyError, ValueError):
        return []


class ProfileCapture:
    def __init__(self, probe) -> None:
        self.probe = probe
        self.planned = requested_at_start()  # (first step, steps) of the captures to come, soonest first
        # The next one's first step: an attribute, not a property of ``planned``, as every
        # timed step's end reads it.
        self.start_at = self.planned[0][0] if self.planned else math.inf
        self.active = None  # the running torch.profiler.profile
        self.first = 0
        self.until = 0  # the first step after the capture
        self.started_ns = 0
        self._reports: list[threading.Thread] = []

    def request(self, command: dict) -> None:
        """A capture from the next step on (or ``at_step``, the same on every rank)."""
        start = command.get("at_step") or self.probe.clock.step + 1
        self.planned = sorted(self.planned + [(start, max(1, int(command["steps"])))])
        self.start_at = self.planned[0][0]

    def at_boundary(self, next_step: int) -> bool:
        """Between steps, before ``next_step``: start or stop a capture. True if either happened."""
        if self.active is not None and next_step >= self.until:
            self._stop(next_step)
            return True
        if self.active is None and next_step >= self.start_at:
            _, steps = self.planned.pop(0)
            self.start_at = self.planned[0][0] if self.planned else math.inf
            self._start(next_step, steps)
            return True
        return False

    def _start(self, step: int, steps: int) -> None:
        if profiler_running():
            self._report(step, step, error="a profiler is already running in the script: fastmon's would stop it")
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.probe.cuda and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        try:
            profiler = torch.profiler.profile(activities=activities, record_shapes=True, with_stack=True)
            profiler.start()
        except Exception as exc:
            self._report(step, step, error=describe(exc))
            return
        self.active, self.first, self.until = profiler, step, step + steps
        self.started_ns = time.perf_counter_ns()
        self.probe.event("profile_started", first=step, steps=steps)

    def _stop(self, next_step: int) -> None:
        profiler, self.active = self.active, None
        seconds = (time.perf_counter_ns() - self.started_ns) / 1e9
        try:
            profiler.stop()
        except Exception as exc:
            self._report(self.first, next_step - 1, error=describe(exc))
            return
        thread = threading.Thread(target=self._write, args=(profiler, self.first, next_step - 1, seconds),
                                  name="fastmon-profile", daemon=True)
        thread.start()
        self._reports.append(thread)

    def _write(self, profiler, first: int, last: int, seconds: float) -> None:
        try:
            folder = os.environ.get("FASTMON_RUN_DIR") or "."
            rank = f"-rank{self.probe.rank}" if self.probe.world_size > 1 else ""
            path = os.path.join(folder, f"profile-step{first}{rank}.pt.trace.json.gz")
            write_gzipped_trace(profiler, path)
            self._report(first, last, file=os.path.abspath(path), seconds=round(seconds, 3),
                         **top_ops(profiler), patterns=anti_patterns(profiler, self.probe.cuda))
        except Exception as exc:
            self._report(first, last, error=describe(exc))

    def _report(self, first: int, last: int, **fields) -> None:
        self.probe.event("profile", first=first, last=last, **fields)

    def abandon(self) -> None:
        """The probe is going off: a capture still running stops, unreported (the profiler
        would otherwise slow every step to the end)."""
        profiler, self.active, self.planned, self.start_at = self.active, None, [], math.inf
        if profiler is not None:
            try:
                profiler.stop()
            except Exception:
                pass

    def close(self) -> None:
        """At the script's exit: a capture still running ends with the steps it has."""
        if self.active is not None:
            self._stop(self.probe.clock.step)
        for thread in self._reports:
            thread.join(EXPORT_WAIT_S)


def write_gzipped_trace(profiler, path: str) -> None:
    """torch's own ``.gz`` export compresses line by line in Python (1.3 s for a 7 MB trace,
    the GIL taken back at every line, while the training wants it); the plain export and
    1 MiB chunks through zlib take 0.2 s."""
    plain = path.removesuffix(".gz")
    profiler.export_chrome_trace(plain)
    try:
        with open(plain, "rb") as source, gzip.open(path, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
    finally:
        os.remove(plain)


def top_ops(profiler) -> dict:
    """The operators with the most self time, on the host and (CUDA) on the device: what the
    profiler's own table sorted by self time shows first. Worked out from the raw events:
    ``key_averages`` first builds a Python object per event (seconds for a capture of
    conv-net steps with stacks, while the training waits on the GIL); this takes ~0.1 s."""
    spans_by_thread: dict[int, list] = collections.defaultdict(list)
    device_ns: collections.Counter = collections.Counter()
    device_calls: collections.Counter = collections.Counter()
    for event in kineto_events(profiler):
        device = str(event.device_type())
        if device.endswith("CPU") and is_python_frame(event):
            continue  # a Python frame (with_stack), not an operator
        try:
            name = event.name()
        except UnicodeDecodeError:  # torch 2.13 sometimes hands over a name that is not UTF-8
            continue
        if device.endswith("CUDA"):
            device_ns[name] += event.duration_ns()
            device_calls[name] += 1
        elif device.endswith("CPU"):
            start = event.start_ns()  # end_ns() came in torch 2.5: start + duration is the same
            spans_by_thread[event.start_thread_id()].append((start, start + event.duration_ns(), name))
    self_ns: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for spans in spans_by_thread.values():
        spans.sort(key=lambda span: (span[0], -span[1]))  # a parent before the children it holds
        open_spans: list[list] = []  # [end, name, self ns], innermost last
        for start, end, name in spans:
            while open_spans and open_spans[-1][0] <= start:
                done = open_spans.pop()
                self_ns[done[1]] += done[2]
                calls[done[1]] += 1
            if open_spans:
                open_spans[-1][2] -= end - start  # a child's time is not its parent's own
            open_spans.append([end, name, end - start])
        for done in open_spans:
            self_ns[done[1]] += done[2]
            calls[done[1]] += 1
    ops = {name: ns for name, ns in self_ns.items() if "::" in name}  # aten::, c10d::...: operators
    out = {"top_cpu": _table(ops, calls)}
    if device_ns:
        out["top_device"] = _table(device_ns, device_calls)
    return out


def _table(self_ns: dict, calls: dict) -> list[dict]:
    total = sum(self_ns.values()) or 1
    ranked = sorted(self_ns.items(), key=lambda item: item[1], reverse=True)[:TOP_OPS]
    return [{"name": name, "calls": calls[name], "self_us": round(ns / 1e3, 1), "share": round(ns / total, 4)}
            for name, ns in ranked if ns > 0]


def anti_patterns(profiler, cuda: bool) -> list[dict]:
    """torch's anti-pattern matchers over the capture: one entry per pattern and source line."""
    matcher = pattern_matcher()
    if matcher is None:
        return []
    found: dict[tuple[str, str], dict] = {}
    for name in PATTERNS + (CUDA_PATTERNS if cuda else []):
        try:
            pattern = getattr(matcher, name)(profiler, False)
            for event in pattern.matched_events():
                where = user_code_location(event, matcher)
                entry = found.setdefault((pattern.name, where), {
                    "name": pattern.name, "where": where, "count": 0, "url": pattern.url,
                    "message": pattern.description.split("\n")[0].strip()})
                entry["count"] += 1
        except Exception:
            continue  # a private API: a matcher that breaks on this torch is left out
    return list(found.values())


def user_code_location(event, matcher) -> str:
    """The innermost Python caller above ``event`` that is neither torch nor this probe (whose
    wrappers sit between the user's line and torch's): "file:line", or torch's "no location"."""
    while event:
        if event.tag in (matcher._EventType.PyCall, matcher._EventType.PyCCall):
            caller = event.extra_fields.caller
            path = Path(caller.file_name)
            ours = path.parent.name == "probe" and path.name in _PROBE_FILES
            if not caller.file_name.startswith("torch" + os.sep) and not ours:
                return f"{caller.file_name}:{caller.line_number}"
        event = event.parent
    return "no source location"
