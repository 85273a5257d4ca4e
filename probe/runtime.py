"""The installed probe: owns the clock, the publisher and the hook parts."""

from __future__ import annotations

import atexit
import math
import os
import sys
import weakref
from time import perf_counter_ns

import torch

from fastmon.probe import facts
from fastmon.probe.anomaly_cost import AnomalyCostPart
from fastmon.probe.autograd_hooks import BackwardPart
from fastmon.probe.clock import StepClock
from fastmon.probe.code_checks import CodeChecksPart
from fastmon.probe.compiling import CompileWatch
from fastmon.probe.exit_signals import script_signals_set_aside
from fastmon.probe.flop_count import FlopCount
from fastmon.probe.forward_hooks import ForwardPart
from fastmon.probe.guard import Part, describe
from fastmon.probe.hotapply import HotApply
from fastmon.probe.loader_hooks import LoaderPart
from fastmon.probe.optim_hooks import OptimizerPart
from fastmon.probe.profiling import ProfileCapture
from fastmon.probe.publisher import Publisher, rank_from_env
from fastmon.probe.sampling import TimingSchedule
from fastmon.probe.exec_hooks import ExecPart
from fastmon.probe.pipeline_stages import PipelinePart, totals as pipeline_totals
from fastmon.probe.sleep_hooks import SleepPart

SETTINGS_EVERY = 50  # steps between polls of torch's global settings

_PROBE: "Probe | None" = None


def allocator_memory() -> tuple[int, int, int]:
    """The CUDA allocator's allocated, reserved and peak allocated bytes, from one reading
    of its statistics: ``memory_allocated()`` and its kin each build and flatten all ~120
    of them in Python (benchmarks/results/cuda-memory-reads.md)."""
    stats = torch.cuda.memory_stats_as_nested_dict()  # {} before CUDA is initialized
    allocated = stats.get("allocated_bytes", {}).get("all", {})
    reserved = stats.get("reserved_bytes", {}).get("all", {})
    return allocated.get("current", 0), reserved.get("current", 0), allocated.get("peak", 0)


class Probe:
    def __init__(self, channel_path: str | None) -> None:
        self.rank, self.local_rank, self.world_size = rank_from_env()
        # The run's secret, for the monitor only: out of the environment the script and its children see
        secret = os.environ.pop("FASTMON_SECRET", "")
        self.publisher = Publisher(channel_path, self.rank, {
            "t": "hello", "secret": secret, "pid": os.getpid(), "rank": self.rank, "local_rank": self.local_rank,
            "world_size": self.world_size, "argv": list(sys.argv)})
        self.publisher.on_control = self._wake
        self.cuda = torch.cuda.is_available()
        self.clock = StepClock(self.publisher.put_event, allocator_memory if self.cuda else None)
        self.publisher.before_send = self._before_send
        self.events = None
        self.next_housekeeping = -1  # the step after which _housekeeping next runs
        self.schedule = TimingSchedule(every_step=os.environ.get("FASTMON_EVERY_STEP") == "1")
        self.next_timed_step = 0  # while untimed steps run: the step at which timing resumes
        self.sent_facts: dict[str, object] = {}
        self.faults: set[str] = set()
        self.in_fork_child = False
        self.suspended = False
        self.suspended_at = 0
        self.forward_part = ForwardPart(self)
        self.loader_part = LoaderPart(self)
        self.backward_part = BackwardPart(self)
        self.optimizer_part = OptimizerPart(self)
        self.checks_part = CodeChecksPart(self)
        self.pipeline_part = PipelinePart(self)
        self.parts = [self.forward_part, self.loader_part, self.backward_part, self.optimizer_part, self.checks_part,
                      AnomalyCostPart(self), SleepPart(self), ExecPart(self), self.pipeline_part]
        import torch.distributed as dist

        self.dist_part = None
        self.ddp_watch = None  # the DistPart once a DDP model has been seen
        if dist.is_available():
            from fastmon.probe.dist_hooks import DistPart

            self.dist_part = DistPart(self)
            self.parts.append(self.dist_part)
        if self.cuda:
            from fastmon.probe.device_hooks import DevicePart

            self.device_part = DevicePart(self)
            self.parts.append(self.device_part)
        self.hot = HotApply(self)
        self.compile_watch = CompileWatch(self)
        self.profile = ProfileCapture(self)
        self.flops = FlopCount(self)
        # what starts and stops at step boundaries (the hot-apply side: an interleaved trial's switches)
        self.between_steps = (self.profile, self.flops, self.hot)
        # What arm/disarm visit (the collectives' wrappers stay in: they time only timed steps)
        self.toggled = [part for part in self.parts if type(part).arm is not Part.arm]

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self.fact("environment", facts.environment())
        self.fact("settings", facts.settings())
        for part in self.parts:
            try:
                part.install()
                if part in self.toggled:
                    part.arm()
            except Exception as exc:
                part.on = False
                self.report_fault(part.name, exc)
        self.publisher.start()
        os.register_at_fork(after_in_child=self._after_fork_in_child)
        atexit.register(self.close)

    def _after_fork_in_child(self) -> None:
        # DataLoader workers and other forks inherit the patches: they must stay silent.
        self.in_fork_child = True
        self._all_off()
        self.publisher._sock = None

    def close(self) -> None:
        """At the interpreter's exit (atexit): the last steps and the bye. Never raises:
        whatever happens here, the script's exit is python's."""
        try:
            with script_signals_set_aside():
                self._close()
        except BaseException:  # noqa: BLE001 - an exit's last words are the script's, never fastmon's
            pass

    def _close(self) -> None:
        if self.in_fork_child:
            return
        clock = self.clock
        if not self.optimizer_part.created and clock.backwards_since_step and clock.timing and self.backward_part.on:
            self.end_step()  # without an optimizer a step ends when the next begins: the last, here
        self._all_off()
        try:
            self.profile.close()
        except Exception as exc:
            self.report_fault("profile", exc)
        self.flops.close()
        try:
            self._say_timing(final=True)
        except Exception as exc:
            self.report_fault("sampling", exc)
        try:
            if self.forward_part.compile_in_use:
                self.compile_watch.at_round(self.clock.step)
        except Exception as exc:
            self.report_fault("compile", exc)
        self.publisher.close(final={"t": "bye", "steps": self.clock.step})

    def suspend(self) -> None:
        """Take every patch and hook out, so that the process runs as bare torch until
        ``resume``; the overhead benchmark's in-process A/B alternates the two."""
        if self.suspended:
            return
        self.suspended = True
        self.suspended_at = perf_counter_ns()
        self.clock.flush_untimed()
        for part in self.parts:
            if part.on:
                part.uninstall()

    def resume(self) -> None:
        """Put the probe back as it was: the step in progress stays timed or untimed."""
        if not self.suspended:
            return
        self.suspended = False
        for part in self.parts:
            if part.on:
                part.install()
                if part in self.toggled:
                    (part.arm if self.clock.timing else part.disarm)()
        self.schedule.skip(perf_counter_ns() - self.suspended_at)
        self.clock.resumed()

    # --- which steps are timed (fastmon.probe.sampling) -----------------------------
    def arm(self) -> None:
        if not self.clock.timing:
            self.clock.short_until = -1
            self.clock.short_ref = None
            self._switch(True)

    def disarm(self) -> None:
        if self.clock.timing:
            self.clock.start_untimed()
            self._switch(False)

    def _switch(self, timing: bool) -> None:
        self.clock.timing = timing
        for part in self.toggled:
            if part.on:
                try:
                    (part.arm if timing else part.disarm)()
                except Exception as exc:
                    part.fail(exc)

    def time_from_here(self) -> None:
        """Time the rest of the untimed step in progress (its earlier part counts as other)."""
        try:
            self.clock.flush_untimed()
            self.arm()
        except Exception as exc:
            self._step_fault(exc)

    def _plan_next(self, step: int, now_ns: int, changed: bool, optimizer) -> None:
        """After timed step ``step`` (ended by ``optimizer``'s step, or None): time the next
        one, or disarm until the drawn step."""
        next_timed = step + self.schedule.gap(step, now_ns)
        if next_timed > step + 1 and not (changed or self.forward_part.discovering or not self.optimizer_part.created
                                          or self.hot.waiting or self._between_steps_active()):
            self.next_timed_step = next_timed
            self.disarm()  # the next step ends the long way: the schedule measures from its end

    def _before_send(self) -> None:
        """In the publisher's thread, before each send: what the training thread leaves for it."""
        self.clock.flush_untimed()
        self.clock.let_go_of_dropped_iterator()
        self.loader_part.report()
        stages = pipeline_totals()
        if stages["datasets"] or stages["batch_stages"]:  # the training process's own stage times
            self.fact("pipeline", {key: stages[key] for key in ("datasets", "batch_stages", "off_cpu_ns",
                                                                "run_delay_ns")})
        self._say_timing()
        if self.forward_part.compile_in_use:
            self.compile_watch.at_round(self.clock.step)

    def _say_timing(self, final: bool = False) -> None:
        timing = self.schedule.news(final)
        if timing is not None:
            self.fact("timing", timing)

    def _wake(self) -> None:
        """Commands arrived: the next untimed step's end takes them."""
        self.clock.short_until = -1

    def _set_wake(self, optimizer) -> None:
        """Untimed steps of ``optimizer`` end the short way until the step before the next
        timed one, the step of the next gradient-norm sample, or the next step whose end the
        schedule measures its timed steps' cost by, whichever comes first."""
        short_until = min(self.next_timed_step - 1, self.schedule.next_mark(self.clock.step),
                          *(task.start_at - 1 for task in self.between_steps))
        if self.checks_part.on:
            short_until = min(short_until, self.checks_part.next_norm_step)
        if self.hot.waiting or not self.optimizer_part.fast or optimizer is None:
            self.clock.short_until, self.clock.short_ref = -1, None
            return
        self.clock.short_ref = weakref.ref(optimizer)
        self.clock.short_until = short_until
        if self.publisher.control:
            # Commands are waiting: the next end takes them. Tested after the write, because
            # the publisher's thread appends a command, then wakes (-1): a wake that landed
            # before the write above was overwritten, and its command is in the deque by now.
            self.clock.short_until = -1

    # --- what parts call ------------------------------------------------------------
    def end_step(self, leaving: bool = False, optimizer=None) -> None:
        """A timed step ends; ``leaving``: from inside the optimizer phase, which closes with
        it; ``optimizer``: the one whose step ended it."""
        try:
            clock = self.clock
            if not clock.forwards and clock.backwards_since_step and self.forward_part.forward_missed(clock.step):
                self.next_housekeeping = -1  # the discovery's end is housekeeping
            self.loader_part.before_step_end()
            now = clock.end_step(leaving)
            if self.forward_part.compile_in_use:
                self.compile_watch.at_step_end(clock.step - 1)
            if self.clock.step > self.next_housekeeping:
                self._housekeeping(self.clock.step - 1)
            loader = self.loader_part.last_loader
            if loader is not None and self.loader_part.train_loader is None and loader.role != "eval":
                self.loader_part.set_training(loader)  # no training forward seen (a compiled step)
            if self.events is not None:
                for row in self.events.end_step(self.clock.step - 1):
                    self.message(dict(row, t="device", rank=self.rank))
            changed = self._take_control(clock.step)
            changed = self._at_boundary(clock.step) or changed
            self._plan_next(clock.step - 1, now, changed, optimizer)
        except Exception as exc:
            self._step_fault(exc)

    def end_untimed_step(self, optimizer=None) -> None:
        """An untimed step ends and something is due (the monitor's commands, timing from
        the next step on, a gradient-norm sample of ``optimizer``, the one that just
        stepped), or it ends the long way (a skipped GradScaler step, nested steps). The
        optimizer's post hook has the plain case inline."""
        try:
            entered = perf_counter_ns()
            clock = self.clock
            if optimizer is not None:
                self.checks_part.grad_norm_if_due(optimizer)
            resume_timing = self._take_control(clock.step + 1) or clock.step + 1 >= self.next_timed_step
            resume_timing = self._at_boundary(clock.step + 1) or resume_timing
            if resume_timing:
                self.schedule.arming(clock.step, entered)
                self.arm()  # the step after a change is timed too: it shows what the change did
            end = perf_counter_ns()
            clock.ends.append(end)
            clock.readings.append(clock.reading())
            clock.step += 1
            if resume_timing:
                clock.flush_untimed()
            else:
                self.schedule.untimed_end(clock.step - 1, end)
                self._set_wake(optimizer)
        except Exception as exc:
            self._step_fault(exc)

    def _between_steps_active(self) -> bool:
        return any(task.active is not None for task in self.between_steps)

    def _at_boundary(self, next_step: int) -> bool:
        """Before ``next_step``: a torch.profiler capture or a FLOP count starts or stops
        where one is due. True if any did."""
        changed = False
        for task in self.between_steps:
            if task.active is not None or next_step >= task.start_at:
                changed = task.at_boundary(next_step) or changed
        return changed

    def _take_control(self, next_step: int) -> bool:
        """Carry out the monitor's commands that are due before ``next_step``; True if any was."""
        control = self.publisher.control
        ran = bool(control)
        while control:
            command = control.popleft()
            if command.get("t") == "profile":
                self.profile.request(command)
            else:
                self.hot.handle(command, next_step)
        if self.hot.waiting:
            ran = self.hot.due(next_step) or ran
        return ran

    def _step_fault(self, exc: BaseException) -> None:
        self.report_fault("step", exc)
        self.profile.abandon()
        self.flops.close()
        self._all_off()
        for part in self.parts:
            try:
                part.uninstall()
            except Exception:
                pass

    def _all_off(self) -> None:
        for part in self.parts:
            part.on = False
        self.optimizer_part.fast = False
        self.clock.short_until = -1
        self.clock.short_ref = None

    def _housekeeping(self, step: int) -> None:
        """What is not needed at every step: the end of module discovery, the retained-loss
        look, the settings poll. Runs at the steps that need it, and no others."""
        forward, backward = self.forward_part, self.backward_part
        if forward.discovering:
            forward.after_step(step)
        backward.after_step(step)
        if step % SETTINGS_EVERY == 0:
            self.settings_fact()
            self.fact("trackers", facts.experiment_trackers())
            if not forward.discovering:
                forward.check_call_slots()
        self.next_housekeeping = min(step + 1 if forward.discovering else math.inf,
                                     step - step % SETTINGS_EVERY + SETTINGS_EVERY,
                                     backward.next_check())

    def cuda_mark(self, name: str) -> None:
        """A CUDA event at a phase boundary; callers check ``self.cuda`` first."""
        if self.events is None:
            if not torch.cuda.is_initialized():
                return
            from fastmon.probe.cuda_timing import EventRing

            self.events = EventRing()
        self.events.mark(name)

    def message(self, message: dict) -> None:
        self.publisher.message(message)

    def settings_fact(self) -> None:
        """torch's global settings, as the rules read them (when they changed)."""
        settings = facts.settings()
        if self.profile.active is not None:
            settings["profiler_on"] = False  # fastmon's own capture, a few steps long, asked for
        self.fact("settings", settings)

    def fact(self, key: str, value) -> None:
        if self.sent_facts.get(key) != value:
            self.sent_facts[key] = value
            self.message({"t": "fact", "key": key, "value": value, "rank": self.rank, "step": self.clock.step})

    def event(self, kind: str, **fields) -> None:
        self.message({"t": "event", "kind": kind, "rank": self.rank, "step": self.clock.step, **fields})

    def report_fault(self, part: str, exc: BaseException) -> None:
        if part in self.faults:
            return
        self.faults.add(part)
        self.event("probe_fault", part=part, error=describe(exc))
        try:
            sys.stderr.write(f"fastmon: the probe's {part!r} hooks hit an internal error and are now off "
                             f"(your training is unaffected): {describe(exc)}\n")
        except Exception:
            pass


def install(channel_path: str | None = None) -> Probe:
    global _PROBE
    if _PROBE is None:
        _PROBE = Probe(channel_path)
        _PROBE.start()
    return _PROBE


def current() -> Probe | None:
    return _PROBE
