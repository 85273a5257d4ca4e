"""The monitor-side session: spawn the training process, own the channel, record the
run, sample the host and GPUs, run the advisor and the hot-apply experiments.

Every change to the run's state runs on one thread (fastmon.state_owner); the screens
(headless printer, TUI) read ``session.view``, the immutable view it publishes, on their
own timers, and call ``apply``, ``dismiss``, ``profile`` as commands to that thread.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from fastmon import __version__
from fastmon.advisor import Facts, Window, advise, recent, rules_digest
from fastmon.advisor.facts import epochs_from_argv
from fastmon.advisor.verdict import of_straggler
from fastmon.channel import ChannelServer
from fastmon.common.handover import OUTPUT_FDS_ENV
from fastmon.common.run_status import RunStatus
from fastmon.common.sample_count import samples_in_first
from fastmon.common.step_events import StepAssembler
from fastmon.common.verdicts import APPLYING, DISMISSED, OPEN, advice_status
from fastmon.common.wire import SEND_EVERY
from fastmon.experiments import EPOCHS_MEASURED, ExperimentRunner, LoaderFigures, last_epoch_measured
from fastmon.job_link import node_rank
from fastmon.live_state import LiveState, LiveView, RankState
from fastmon.node_hub import NodeHub
from fastmon.loggers import LOG_EVERY, METRICS_PORT, TrackerLog
from fastmon.pipeline import pipeline_summary
from fastmon.printed_loss import printed_losses
from fastmon.progress import script_args
from fastmon.records import DEVICE_FIELDS, Recorder, new_run_dir
from fastmon.samplers import GpuSampler, HostSampler
from fastmon.script_output import ScriptOutput
from fastmon.state_owner import Busy, StateOwner
from fastmon.summary import counted_samples, first_count, flops_figures, rank_table, rows_span, samples_during

ADVISOR_WINDOW = 200  # steps the advisor looks at
ADVISE_EVERY = 1.0
PIPELINE_EVERY = 2.0  # seconds between reads of the data pipeline's stage times (fastmon.pipeline)
PROFILE_STEPS = 5  # steps in a torch.profiler capture unless asked otherwise
SAMPLE_EVERY = 0.5
MIN_ADVISE_STEPS = 5  # the first steps (imports, warm-up) are not representative
# Host samples that tell the machine's load (1.5 s): the rules read at least these many, and
# --apply auto waits for them, so that what another job's load costs is fixed first.
LOAD_SAMPLES = 3
# Under DDP a change is scheduled this far ahead of the furthest rank the monitor has heard
# of: a rank's steps arrive once a publisher round, so it may be a round past what the
# monitor knows; a command is read as it arrives, and taken at the next step's end.
SYNC_AHEAD_SECONDS = SEND_EVERY + 0.5
SYNC_AHEAD_MIN_STEPS = 3
# Another node's steps reach node 0's monitor a round of that node's monitor later.
LINK_AHEAD_SECONDS = 2.0
OUTPUT_PENDING = 8 * 2**20  # the script's output waiting for the screens, at most
OUTPUT_SHOWN = 2 * 2**20  # ... and kept for them: the log pane's last lines, a replay reads the rest


@dataclass
class RunOptions:
    target: list[str]  # [script, *args] or ["-m", module, *args]
    apply: str = "never"  # ask | auto | never
    allow: frozenset = frozenset()  # advice ids auto may apply although they change the maths
    runs_dir: str = "fastmon-runs"
    torchrun: list[str] | None = None  # torchrun's own options, when launching through it
    every_step: bool = False  # time the phases of every step, not a sample of short ones
    profile_at: int | None = None  # capture steps from this one with torch.profiler
    profile_steps: int = PROFILE_STEPS
    log_to: tuple[str, ...] = ()  # experiment trackers fastmon's figures go to (fastmon.loggers)
    metrics_port: int = METRICS_PORT  # --log-to prometheus: where /metrics is served
    job_port: int | None = None  # a multi-node job: where node 0's monitor listens (default master port + 1)
    job_addr: str | None = None  # and on which address (default: job_link.listen_host)
    tokens_per_sample: int | None = None  # where the model's inputs hold no token ids fastmon finds (docs/sharded.md)
    python: str = sys.executable


class Session:
    def __init__(self, options: RunOptions, passthrough: bool = False) -> None:
        self.options = options
        self._passthrough = passthrough
        self.output: ScriptOutput | None = None
        # Written only by the owner's thread (its work is the methods named _take_* and
        # _*_command below, and the advisor); everyone else reads self.view.
        self._state = LiveState()
        self.view: LiveView = self._state.view()
        self._owner = StateOwner(self._publish, self._owner_error)
        self._owner.every(ADVISE_EVERY, self._advise)
        self._owner.every(PIPELINE_EVERY, self._read_pipeline)
        self._failures: collections.Counter = collections.Counter()  # the owner's work that raised, by name
        self.proc: subprocess.Popen | None = None
        self.root_pid: int | None = None  # the process whose tree is the training's (proc, or an attached job's)
        self.launcher = False  # ... and it is a launcher (torchrun) whose children are the ranks
        self.run_dir: Path | None = None
        self.recorder: Recorder | None = None
        self.channel: ChannelServer | None = None
        self.gpu = GpuSampler()
        self.experiments = ExperimentRunner(self._send_control, self._experiment_done)
        self._assemblers: dict[int, StepAssembler] = {}  # rank -> its step rows from its event log
        self.dismissed: set[str] = set()
        self.tried: set[str] = set()
        self.worker_pids: dict[int, set[int]] = {}  # each rank's DataLoader workers
        self.trainer_pids: set[int] = set()  # the ranks' processes, as their probes said hello
        self.steps_made: dict[int, int] = {}  # each rank's steps, as its probe counted them at the end
        self.trainer_exit: float | None = None  # when the training process ended, as the monitor saw it
        self.host: HostSampler | None = None
        self._stop = threading.Event()
        self._finish_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.tracker_log: TrackerLog | None = None
        self.metrics_server = None  # --log-to prometheus
        self._output_pending = 0  # bytes of output posted to the owner and not taken yet
        self._output_skipped = 0  # ... and those left to output.log alone
        self._tracker_lock = threading.Lock()  # its thread, and finish() for the last point
        # A multi-node job (fastmon.job_link): node 0's monitor gathers, the others stream.
        self.hub = NodeHub(self)
        self._asked_to_apply: str | None = None  # advice the user applied before it could be measured
        self._terminations = 0  # SIGTERMs passed on
        self._ctrl_c_ignored = False

    @property
    def passthrough(self) -> bool:
        """The script's output goes through to fastmon's own (headless, or detached)."""
        return self._passthrough

    @passthrough.setter
    def passthrough(self, value: bool) -> None:
        self._passthrough = value
        if self.output is not None:
            self.output.passthrough = value

    # --- start ------------------------------------------------------------------------
    @property
    def script_name(self) -> str:
        target = self.options.target
        name = target[1] if target[0] == "-m" else Path(target[0]).stem
        return name.replace("/", "_").replace(".", "_")

    def command(self) -> list[str]:
        probe = ["-m", "fastmon.probe", *self.options.target]
        if self.options.torchrun is not None:
            return [self.options.python, "-m", "torch.distributed.run", *self.options.torchrun, *probe]
        return [self.options.python, *probe]

    def start(self) -> None:
        self._open_record()
        env = dict(os.environ, FASTMON_CHANNEL=self.channel.path, FASTMON_SECRET=self.channel.secret,
                   FASTMON_RUN_DIR=str(self.run_dir), FASTMON_MONITOR_PID=str(os.getpid()),
                   PYTHONUNBUFFERED="1", FASTMON_EVERY_STEP="1" if self.options.every_step else "0")
        if self.options.profile_at is not None:
            env["FASTMON_PROFILE"] = f"{self.options.profile_at}:{self.options.profile_steps}"
        (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
        kept = ()
        if self.options.torchrun is None:
            # The trainer holds the read ends too, so its writes outlive the monitor (probe/output.py).
            # Not torchrun: it would hold them without reading them, and its ranks do not get them.
            kept = (out_read, err_read)
            env[OUTPUT_FDS_ENV] = f"{out_read},{err_read}"
        # the training inherits an ignored Ctrl-C (started under nohup): interrupt() cannot stop it so
        self._ctrl_c_ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        try:
            self.proc = subprocess.Popen(self.command(), stdout=out_write, stderr=err_write, env=env, pass_fds=kept)
        finally:
            os.close(out_write)
            os.close(err_write)
        self.root_pid, self.launcher = self.proc.pid, self.options.torchrun is not None
        self.output = ScriptOutput(self.run_dir, self._on_output, self._ask_to_close_output, self.passthrough,
                                   on_error=self._notice)
        self._begin({"stdout": out_read, "stderr": err_read})

    def _open_record(self) -> None:
        """The run folder, its record and the channel the probes connect to."""
        self.run_dir = new_run_dir(self.options.runs_dir, self.script_name)
        self.recorder = Recorder(self.run_dir, on_error=self._record_error)
        self.channel = ChannelServer(lambda message: self._owner.post(self._take_message, message),
                                     on_command=self.watch_command)
        self.channel.start()
        meta = {"watch": {"channel": self.channel.path, "secret": self.channel.watch_secret},  # fastmon watch's a, d
                "target": self.options.target, "command": self.command(), "cwd": os.getcwd(),
                "started": self._state.started, "apply": self.options.apply, "torchrun": self.options.torchrun,
                "gpu_note": self.gpu.note, "script": " ".join(self.options.target),
                "profile_at": self.options.profile_at, "tokens_per_sample": self.options.tokens_per_sample,
                "monitor_pid": os.getpid(),  # a report of the record while it runs says so
                # what `fastmon compare` names when two runs' environments differ
                "fastmon": __version__, "python": platform.python_version(), "host": socket.gethostname(),
                "gpu_driver": self.gpu.driver, "advisor": rules_digest(),
                "script_digest": script_digest(self.options.target)}
        for key, value in meta.items():
            self.recorder.meta(key, value)

    def _begin(self, streams: dict[str, int] | None) -> None:
        """The training runs: the owner, the script's output (its pipes' read ends, if
        fastmon holds them), the samplers, the other nodes and the loggers start."""
        self._state.status = RunStatus.RUNNING
        self._publish()  # no other thread writes yet
        self._owner.start()
        if streams:
            self.output.start(streams)
        self._spawn(self._sample_loop)
        self.hub.link()
        if "prometheus" in self.options.log_to and importlib.util.find_spec("prometheus_client"):
            self._serve_metrics()
        if set(self.options.log_to) - {"prometheus"}:
            self.tracker_log = TrackerLog(list(self.options.log_to), self.run_dir, self._notice)
            self._spawn(self._log_loop)

    def _serve_metrics(self) -> None:
        from fastmon.prometheus import serve

        try:
            self.metrics_server, port, taken = serve(lambda: self.view, self.run_dir.name,
                                                     node_rank(self.options.torchrun), self.options.metrics_port,
                                                     self.hub.of_this_node)
        except Exception as exc:  # the training, started already, matters more than its metrics
            self._notice(f"--log-to prometheus: /metrics could not be served: {type(exc).__name__}: {exc}")
            return
        self._notice(("" if taken is None else f"--log-to prometheus: {taken}; ")
                     + f"metrics for Prometheus at http://{socket.gethostname()}:{port}/metrics")

    def _record_error(self, message: str | None) -> None:
        """The run file cannot be written (a full disk), or can again (None)."""
        text = f"[fastmon] {message}" if message else "[fastmon] the run file can be written again: recording resumes"
        self._owner.post(self._state.events.append, {"kind": "record_error", "message": text})
        self._say(text)

    def _notice(self, message: str) -> None:
        """A line for the user that is not the script's: recorded, and said where output passes."""
        self._owner.post(self._state.events.append, {"kind": "notice", "message": message})
        self.recorder.put("events", (time.time(), 0, None, "notice", json.dumps({"message": message})))
        self._say(f"[fastmon] {message}")

    def _say(self, text: str) -> None:
        if self.passthrough:
            try:
                if self.output is None:
                    sys.stderr.write(text + "\n")
                    sys.stderr.flush()
                else:
                    self.output.say([text])
            except (OSError, ValueError):
                pass

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"fastmon-{target.__name__}")
        thread.start()
        self._threads.append(thread)

    # --- the owner's thread ------------------------------------------------------------
    def _publish(self) -> None:
        rank0 = self._state.ranks.get(0)
        self.view = self._state.view(self.experiments.progress(rank0.rows if rank0 else ()))

    def _owner_error(self, work: str, exc: BaseException) -> None:
        """Work of the owner's that raised: counted, and kept as an event; the monitor goes on."""
        self._failures[work] += 1
        self._state.events.append({"kind": "monitor_error", "in": work, "error": repr(exc)})

    # --- inputs -----------------------------------------------------------------------
    def _on_output(self, stream: str, text: str) -> None:
        """The script's output, for the record's timed log and the screens: output.log has
        all of it; past OUTPUT_PENDING bytes waiting here, the rest goes to the terminal only
        (a script printing 100+ MB/s would otherwise fill the monitor's memory)."""
        if self._output_pending + len(text) > OUTPUT_PENDING:
            self._output_skipped += len(text)
            return
        self._output_pending += len(text)
        self.recorder.put_log((time.time(), stream, text))
        self._owner.post(self._take_output, stream, text)

    def _take_output(self, stream: str, text: str) -> None:
        self._output_pending -= len(text)
        output = self._state.output
        output.append((stream, text))
        self._state.output_chars += len(text)
        while self._state.output_chars > OUTPUT_SHOWN and len(output) > 1:  # the screens' last part of it
            self._state.output_chars -= len(output.popleft()[1])
        self._state.output_seq += 1
        self._state.losses.extend(printed_losses(text))

    def _ask_to_close_output(self, stream: str) -> bool | None:
        """The trainer holds a copy of the stream's read end (not under torchrun): ask it to
        close that, so the script's next write meets the broken pipe. False while it has
        not connected yet; None where it holds no copy."""
        if self.options.torchrun is not None or self.channel is None:
            return None
        return self.channel.send({"t": "output_closed", "stream": stream}) > 0

    def _take_message(self, message: dict) -> None:
        kind = message.get("t")
        rec = self.recorder
        state = self._state
        if kind == "events":
            rows = self._assemble(message)
            for row in rows:
                self.hub.own_rank(row.rank)
                self._take_row(row)
            if rows:
                self.hub.to_node0({"t": "rows", "rows": [list(row) for row in rows]})
        elif kind == "device":
            rec.put("device_steps", tuple(message.get(f) for f in DEVICE_FIELDS))
            self._note_device_busy(message)
        elif kind == "fact":
            state.facts[message["key"]] = message["value"]
            if message["key"] == "dataloader.worker_pids":
                self.worker_pids[message.get("rank", 0)] = set(message["value"])
                if self.host is not None:
                    self.host.worker_pids = set().union(*self.worker_pids.values())
            rec.put("facts", (time.time(), message.get("rank", 0), message["key"], json.dumps(message["value"])))
        elif kind == "event":
            state.events.append(message)
            self._take_event(message)
            self.experiments.on_event(message)
            data = {k: v for k, v in message.items() if k not in ("t", "kind", "rank", "step")}
            rec.put("events", (time.time(), message.get("rank", 0), message.get("step"), message["kind"],
                               json.dumps(data, default=str)))
        elif kind in ("applied", "reverted"):
            rec.put("events", (time.time(), 0, message.get("step"), kind, json.dumps(message, default=str)))
            self.experiments.on_ack(message)
            self.hub.to_node0(message)  # node 0's experiment: it hears every rank's answer
        elif kind == "hello":
            self.trainer_pids.add(message.get("pid"))
            if self.host is not None:
                self.host.trainer_pids = set(self.trainer_pids)
        elif kind == "output_closed":
            self.output.closed_by_trainer(message.get("stream"))
        elif kind == "bye":
            state.dropped += int(message.get("dropped", 0))
            self.steps_made[message.get("rank", 0)] = message.get("steps")
            rec.meta("dropped", state.dropped)
            self.hub.to_node0({"t": "bye", "rank": message.get("rank", 0), "steps": message.get("steps")})

    def _take_row(self, row) -> None:
        rank_state = self._state.ranks.setdefault(row.rank, RankState())
        rank_state.add(row, start_up=not rank_state.steps or (
            row.rank == 0 and any(row.step in r for r in self._state.slowed)))
        self.recorder.put("steps", row)

    # --- the other nodes (node 0's monitor; fastmon.job_link) ---------------------------
    def _take_event(self, event: dict) -> None:
        """The steps an event says are not training (a capture's, compiling, a FLOP count),
        and an exec, said."""
        state = self._state
        if event["kind"] == "profile_started":
            state.capturing = True
            state.captured.append(range(event["first"], event["first"] + event["steps"]))
        elif event.get("rank", 0) == 0 and (event["kind"] == "compiled" or (
                event["kind"] == "flops" and "seconds" in event)):
            state.slowed.append(range(event["from_step"], event["to_step"] + 1))
            rank0 = state.ranks.get(0)
            for row in rank0.rows if rank0 else ():
                if row.step in state.slowed[-1]:
                    rank0.leave_out(row)
        elif event["kind"] == "exec":
            self._notice(f"the training process (rank {event.get('rank', 0)}) replaced itself at step "
                         f"{event.get('step')} with os.exec ({' '.join(event.get('argv') or [])}): fastmon does not "
                         "follow an exec; what it runs from here is not recorded")
        elif event["kind"] == "profile":
            # Until its tables were done the training shared the process with them: those
            # steps are left out too.
            state.capturing = False
            if state.captured and state.captured[-1].start == event["first"]:
                state.captured[-1] = range(event["first"], max(event["step"] + 1, state.captured[-1].stop))

    def _samples_of(self, loader_index: int, batches: int) -> int | None:
        """Samples in the first ``batches`` of an epoch of loader ``loader_index``, from its
        fact (``fastmon.common.sample_count``)."""
        loader = self._state.facts.get(f"loader.L{loader_index}") or {}
        return samples_in_first(batches, loader.get("batch_size"), loader.get("epoch_samples"))

    def _assemble(self, message: dict) -> list:
        rank = message["rank"]
        assembler = self._assemblers.get(rank)
        if assembler is None:
            assembler = self._assemblers[rank] = StepAssembler(rank, self._samples_of, self.options.tokens_per_sample)
        lost = assembler.dropped
        rows = assembler.feed(message["log"], message["perf0"], message["wall0"],
                              gap=message.get("gap", False))
        if assembler.dropped != lost:
            self._state.dropped += assembler.dropped - lost
            self.recorder.meta("dropped", self._state.dropped)
        return rows

    def _note_device_busy(self, row: dict) -> None:
        wall = None
        rank_state = self._state.ranks.get(row.get("rank", 0))
        if rank_state and rank_state.rows:
            wall = rank_state.rows[-1].wall
        busy = sum(row.get(k) or 0 for k in ("device_forward", "device_backward", "device_optimizer"))
        if wall:
            previous = self._state.facts.get("device.busy_fraction")
            value = min(busy / wall, 1.0)
            self._state.facts["device.busy_fraction"] = value if previous is None else 0.9 * previous + 0.1 * value

    def _sample_loop(self) -> None:
        host = self.host = HostSampler(self.root_pid, launcher=self.launcher)
        host.worker_pids = set().union(*self.worker_pids.values())
        host.trainer_pids = set(self.trainer_pids)
        while not self._stop.wait(SAMPLE_EVERY):
            try:
                sample = host.sample()
                pids = {p["pid"] for p in sample["processes"]}
                gpus = self.gpu.sample(pids)
            except Exception as exc:  # a sampler must never take the monitor down
                sample, gpus = {"error": str(exc)}, []
            now = time.time()
            self.recorder.put("samples", (now, "host", json.dumps(sample)))
            if gpus:
                self.recorder.put("samples", (now, "gpu", json.dumps(gpus)))
            self._owner.post(self._state.add_host_sample, sample, gpus, now)

    # --- advisor and experiments (on the owner's thread) -------------------------------
    def _facts(self, rows: list, since: float) -> Facts:
        """What the rules read about the run; the GPU and host samples are those of ``rows``'
        time (the host's reach back to ``since``, the first step advised on)."""
        state = self._state
        return Facts(values=dict(state.facts, script=" ".join(self.options.target),
                                 script_argv=script_args(self.options.target),
                                 advice_acted_on=sorted(self.tried | self.dismissed)), events=list(state.events),
                     gpu=samples_during(state.gpu, rows_span(rows)), host_cpu_count=os.cpu_count() or 1,
                     host_cpu=cpu_during(state.cpu, rows_span(rows), since),
                     ranks=max(len(state.ranks), 1))

    def _log_loop(self) -> None:
        while not self._stop.wait(LOG_EVERY):
            self._log_tick()

    def _log_tick(self, final: bool = False) -> None:
        """The steps since the last point, and what tells the trackers where to write."""
        with self._tracker_lock:
            log, view = self.tracker_log, self.view
            left_out = view.rank(0).left_out
            rows = [r for r in view.measured_rows() if r.step > log.last_step and r.step not in left_out]
            count, facts = first_count(view.events), view.facts
            window = Window.from_rows(rows)
            compute = flops_figures(count, counted_samples(count, rows), window.steps_per_s, window.samples_per_s,
                                    facts) if rows else {}
            log.tick(rows, view.gpu[-1][2] if view.gpu else None, compute, facts.get("trackers") or {}, final)

    def _advise(self) -> None:
        rows = self._state.measured_rows()
        usable = rows[MIN_ADVISE_STEPS:] if len(rows) > MIN_ADVISE_STEPS * 2 else []
        steady = self._steady_rows(rows)
        self.experiments.tick(steady, loader_figures(self._training_loader(), steady))
        if not usable:
            return
        shown = recent(usable, ADVISOR_WINDOW)
        straggler, shown = self._straggler_rows(shown)
        window = Window.from_rows(shown)
        since = rows_span(usable)[0]
        found = advise(window, self._facts(shown, since))
        for advice in found:
            entry = self._state.advice.get(advice.id)
            data = advice.to_dict()
            if straggler is not None:  # as the verdict says it
                data["evidence"] = of_straggler(straggler, data["evidence"])
            if entry is None:
                data.update(status=OPEN, first_step=window.last_step)
                self._state.advice[advice.id] = data
            elif entry["status"] == OPEN:  # once tried, its measured result stands
                entry.update(data)
            else:
                continue
            self.recorder.put("advice", (advice.id, time.time(), json.dumps(self._state.advice[advice.id])))
        asked = self._asked_to_apply
        if asked is not None and not self.experiments.busy:
            if self._state.advice.get(asked, {}).get("status") != OPEN or self._apply_command(asked) is not None:
                self._asked_to_apply = None  # it cannot be any more
        if (self.options.apply == "auto" and not self.experiments.busy and not self.hub.unlinked()
                and self._load_known(since)):
            for advice in found:
                if self._auto_allowed(advice.to_dict()) and self._apply_command(advice.id) is None:
                    break

    def _straggler_rows(self, shown: list) -> tuple[int | None, list]:
        """Under DDP, the straggler's steps over the stretch of rank 0's ``shown``, and its
        rank, where another rank is named one: the job moves at its pace, and the other
        ranks' steps are mostly their wait for it (rank 0 read "communication-bound" and
        got no advice while rank 1 waited 81% of its step for data). Else (None, shown)."""
        state = self._state
        if len(state.ranks) < 2 or not shown:
            return None, shown
        since = {rank: [r for r in state.measured_rows(rank) if r.step >= shown[0].step] for rank in state.ranks}
        _, slowest = rank_table(since, ADVISOR_WINDOW)
        if slowest is None or slowest == 0 or not since[slowest]:
            return None, shown
        return slowest, recent(since[slowest], ADVISOR_WINDOW)

    def _load_known(self, since: float) -> bool:
        """Whether the host's samples since ``since`` tell the machine's load yet (or never
        will: a sample that read no cores)."""
        state = self._state
        return (sum(1 for r in state.cpu if r[0] >= since) >= LOAD_SAMPLES
                or (bool(state.host) and not state.cpu))

    def _steady_rows(self, rows: list) -> list:
        """``rows`` without rank 0's start-up steps (the first, the FLOP count's): what an
        experiment measures."""
        rank0 = self._state.ranks.get(0)
        left_out = rank0.left_out if rank0 else {}
        return [r for r in rows if r.step not in left_out] if left_out else rows

    def _auto_allowed(self, advice: dict) -> bool:
        apply = advice.get("apply")
        if not apply or advice["id"] in self.tried or advice["id"] in self.dismissed:
            return False
        # A rule's Apply says whether its change alters the maths; only those need the user's accept.
        return not apply.get("changes_maths") or advice["id"] in self.options.allow

    def _apply_command(self, advice_id: str) -> str | None:
        advice = self._state.advice.get(advice_id)
        if not advice or not advice.get("apply"):
            return "it has no live change"
        if advice["status"] != OPEN:
            return f"it is {advice['status']} already"
        if self._state.status != RunStatus.RUNNING:
            return "the training has ended"
        if self.experiments.busy:
            return self.experiments.why_busy()
        unlinked = self.hub.unlinked()
        if unlinked:
            return unlinked
        loader = self._training_loader()
        epoch = epoch_for(advice, loader)
        total = epochs_from_argv(script_args(self.options.target))
        if epoch and total and loader.get("epochs") and last_epoch_measured(loader["epochs"]) > total:
            # applied unmeasured, it would only move the "after" of every screen to a stretch
            # of the last epoch with no epoch start in it
            return (f"it is measured over whole epochs (the next one starts the workers, the {EPOCHS_MEASURED} "
                    f"after it are measured), and the run's last is epoch {total} (now {loader['epochs']})")
        rows = self._steady_rows(self._state.measured_rows())
        if self.experiments.start(advice, rows, loader_figures(loader, rows), epoch=epoch) is None:
            # asked for before there are steps to measure it against: it starts by itself once
            # there are (the advice came at ~11 steps, a baseline needs ~20)
            self._asked_to_apply = advice_id
            return None
        if self._asked_to_apply == advice_id:
            self._asked_to_apply = None
        self.tried.add(advice_id)
        advice["status"] = APPLYING
        self.recorder.put("advice", (advice_id, time.time(), json.dumps(advice)))
        return None

    def _profile_command(self, steps: int) -> str | None:
        state = self._state
        if state.status != RunStatus.RUNNING or not state.ranks:
            return "no training steps to profile yet" if state.status == RunStatus.RUNNING else "the training has ended"
        if state.capturing:
            return "a capture is already under way"
        state.capturing = True
        self._send_control({"t": "profile", "steps": steps})
        return None

    def _dismiss_command(self, advice_id: str) -> None:
        self.dismissed.add(advice_id)
        if advice_id in self._state.advice:
            self._state.advice[advice_id]["status"] = DISMISSED
            self.recorder.put("advice", (advice_id, time.time(), json.dumps(self._state.advice[advice_id])))

    def _training_loader(self) -> dict:
        """The training loader's latest fact, {} before one is seen."""
        return Facts(values=dict(self._state.facts)).training_loader() or {}

    def _send_control(self, message: dict) -> None:
        if self.channel is None:
            return
        ranks = self._state.ranks
        if len(ranks) > 1:
            # Under DDP every rank applies the change at the same step, ahead of the
            # furthest rank; a rank already past it refuses, and the experiment fails
            # (and is undone everywhere) rather than split the ranks.
            lead = max((rs for rs in ranks.values() if rs.rows), key=lambda rs: rs.rows[-1].step)
            # the median step's rate: a worker start-up among the last steps made the mean
            # rate a third of the run's, the step too near, and a rank already past it
            rate = 1 / max(statistics.median(r.wall for r in list(lead.rows)[-20:]), 1e-6)
            seconds = SYNC_AHEAD_SECONDS + (LINK_AHEAD_SECONDS if self.hub.job_server is not None else 0)
            ahead = max(SYNC_AHEAD_MIN_STEPS, int(rate * seconds) + 1)
            message = dict(message, at_step=lead.rows[-1].step + ahead)
        self.channel.send(message)
        self.hub.to_nodes(message)

    def _experiment_done(self, result: dict) -> None:
        self._state.applied.append(result)
        self.recorder.put("applied", (result["exp"], time.time(), json.dumps(result)))
        advice = self._state.advice.get(result["id"])
        if advice is not None:
            advice["status"] = advice_status(result)
            advice["result"] = result
            self.recorder.put("advice", (result["id"], time.time(), json.dumps(advice)))

    # --- commands (any thread: run on the owner's) --------------------------------------
    def _command(self, work, *args) -> str | None:
        try:
            return self._owner.ask(work, *args)
        except Busy:
            return "the monitor is busy; try again"
        except Exception as exc:  # kept as a monitor_error event by the owner; the screen says it
            return f"it failed ({type(exc).__name__}: {exc})"

    def apply(self, advice_id: str) -> str | None:
        """Start the advice's change as an experiment. None if started (or to start by itself
        once there are steps to measure it against); else why not now."""
        return self._command(self._apply_command, advice_id)

    def profile(self, steps: int = PROFILE_STEPS) -> str | None:
        """Capture the next ``steps`` steps with torch.profiler (every rank the same ones).
        None if asked; else why not now."""
        return self._command(self._profile_command, steps)

    def dismiss(self, advice_id: str) -> None:
        self._command(self._dismiss_command, advice_id)

    def watch_command(self, do: str, advice_id: str) -> str | None:
        """``fastmon watch``'s a or d (on a thread of the channel's): as the dashboard's,
        under the run's own --apply. None if done; else why not."""
        if do == "dismiss":
            self.dismiss(advice_id)
            return None
        if do != "apply":
            return f"no such command: {do!r}"
        if self.options.apply == "never":
            return self.apply_how()
        return self.apply(advice_id)

    def apply_how(self) -> str:
        """Why a watch cannot apply under --apply never, and how to allow it."""
        return ("this run was started with --apply never (a headless run's default): start it with --apply ask to "
                "apply from a watch, or --apply auto for fastmon to try the safe changes itself")

    def _read_pipeline(self) -> None:
        """The data pipeline's stage times so far (the training thread's fact and the
        workers' files), as a fact the rules read."""
        if self.run_dir is None:
            return
        stages = pipeline_summary(self.run_dir, self._state.facts)
        if stages is not None:
            self._state.facts["pipeline_stages"] = stages

    def advise_once(self) -> None:
        """A look by the advisor now (and a tick of the experiment under way)."""
        self._command(self._advise)

    # --- the end ----------------------------------------------------------------------
    def wait(self) -> int:
        """Wait for the training to end and close the record; safe to call from several
        threads (the dashboard's worker and the launcher): the first one finishes."""
        code = self.proc.wait()
        if self.trainer_exit is None:
            self.trainer_exit = time.time()
        with self._finish_lock:
            if self._state.ended is None:
                self.output.wait_after_exit()  # everything printed is kept
                self.finish(code)
        return self.view.exit_code

    def finish(self, code: int) -> int:
        time.sleep(0.05)
        self._stop.set()
        if self.channel is not None:
            deadline = time.monotonic() + 2.0
            while self.channel.open_connections and time.monotonic() < deadline:
                time.sleep(0.02)
        self.hub.wait_for_nodes()
        self.advise_once()  # what the last messages showed
        if self.tracker_log is not None:
            try:
                self._log_tick(final=True)
            except Exception as exc:  # the record's end comes first
                self._notice(f"--log-to: the last point was not sent: {type(exc).__name__}: {exc}")
            self.tracker_log.close()
        self._command(self._end_command, code)
        self.hub.end(exit_status(code))
        self._owner.stop()  # what was posted so far is taken; nothing later is
        state = self._state
        self.recorder.meta("exit_code", state.exit_code)
        self.recorder.meta("ended", state.ended)
        self.recorder.meta("dropped", state.dropped + self.recorder.dropped_steps)
        self.recorder.meta("steps_made", self.steps_made)
        self.recorder.meta("trainer_exit", self.trainer_exit)
        if self.channel is not None:
            self.recorder.meta("channel", {"refused": self.channel.refused, "failed_messages":
                                           self.channel.failed_messages + self._failures["_take_message"]})
        if self.hub.linked:
            self.recorder.meta("job_link", self.hub.figures())
        self.recorder.meta("output", dict(self.output.close(), screens_skipped_bytes=self._output_skipped,
                                          log_rows_dropped_bytes=self.recorder.log_dropped_bytes))
        self.recorder.close()
        if self.channel is not None:
            self.channel.close()
        self.hub.close()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
        return state.exit_code

    def _end_command(self, code: int) -> None:
        self.experiments.end_of_run()
        self._state.exit_code = exit_status(code)
        self._state.status = RunStatus.FINISHED if code == 0 else RunStatus.CRASHED
        self._state.ended = time.time()

    def interrupt(self) -> None:
        """Ctrl-C for the training process (as if typed in its terminal); SIGTERM where it
        ignores Ctrl-C, which a stop asked on the dashboard must not: it ran on unsaid."""
        if not self.proc or self.proc.poll() is not None:
            return
        if self._ctrl_c_ignored:
            self._notice("the training ignores Ctrl-C (fastmon started with it ignored, as under nohup): "
                         "stopped with SIGTERM")
            self.terminate()
        else:
            self.proc.send_signal(signal.SIGINT)

    def terminate(self) -> None:
        """SIGTERM for the training process, passed on; a second one kills its whole tree:
        torchrun waiting at its exit barrier for a lost node takes no SIGTERM for minutes."""
        if not self.proc or self.proc.poll() is not None:
            return
        self._terminations += 1
        if self._terminations == 1:
            self.proc.terminate()
            return
        import psutil

        try:
            tree = [*psutil.Process(self.proc.pid).children(recursive=True), psutil.Process(self.proc.pid)]
        except psutil.Error:
            tree = []
        for process in tree:
            try:
                process.kill()
            except psutil.Error:
                pass
        self._notice("a second SIGTERM: the training's processes were killed (SIGKILL)")


def script_digest(target: list[str]) -> str | None:
    """The script's text, digested: two runs of the same digest and arguments did the same
    work (``fastmon compare`` measures the noise between runs from them). None for ``-m``."""
    try:
        path = Path(target[0]) if target and target[0] != "-m" else None
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path and path.is_file() else None
    except OSError:
        return None


def exit_status(code: int) -> int:
    """A child killed by signal N exits the shell way: 128 + N."""
    return 128 - code if code < 0 else code


def cpu_during(readings, span: tuple[float, float] | None, since: float) -> dict | None:
    """Cores busy on average while ``span`` ran: the trainer's, its workers', other
    processes' (the machine's less the training's own). A span shorter than ``LOAD_SAMPLES``
    readings takes the latest ones from ``since`` on: another job's load is the machine's,
    not these steps'; the imports and compiles before ``since`` are the run's own churn."""
    if span is None:
        return None
    during = [r for r in readings if span[0] <= r[0] <= span[1]]
    if len(during) < LOAD_SAMPLES:
        during = [r for r in readings if r[0] >= since][-LOAD_SAMPLES:]
    if not during:
        return None
    n = len(during)
    trainer, workers, children, machine = (sum(r[i] for r in during) / n for i in (1, 2, 3, 4))
    return {"trainer": round(trainer, 3), "workers": round(workers, 3), "children": round(children, 3),
            "others": round(max(0.0, machine - trainer - workers - children), 3), "samples": n}


def loader_figures(loader: dict, rows: list) -> LoaderFigures:
    """What a trial reads of the training loader's latest fact: the steps that waited for
    its workers to start, each start-up, an epoch's steps (its batches, over the batches a
    step takes: gradient accumulation takes several)."""
    startups = tuple(tuple(s) for s in loader.get("startups") or ())
    timed = [r.micro_batches for r in rows[-200:] if r.timed and r.micro_batches]
    per_step = max(1.0, sorted(timed)[len(timed) // 2]) if timed else 1.0
    return LoaderFigures(startups, (loader.get("len") or 0) / per_step,
                         loader.get("num_workers") or 0, bool(loader.get("persistent_workers")), loader.get("id"),
                         loader.get("epoch_began"))


def epoch_for(advice: dict, loader: dict) -> int | None:
    """Steps in an epoch where the change shows only at epoch starts: persistent workers;
    None for any other change, or where an epoch's length or start is unknown."""
    if advice["apply"].get("params", {}).keys() != {"persistent_workers"}:
        return None
    epoch_starts = [s for s in loader.get("startups") or () if len(s) < 4 or not s[3]]
    return loader["len"] if loader.get("len") and epoch_starts else None
