"""``fastmon run --log-to``: fastmon's step figures written, from the monitor's own thread,
into the experiment trackers the script already uses: TensorBoard, W&B, MLflow. A
tracker's package is imported only when asked for; docs/integrations.md "Sending figures
to TensorBoard, W&B, MLflow" says where each one's figures land, and why."""

from __future__ import annotations

import importlib.util
import os
import queue
import threading
import time
from pathlib import Path

from fastmon.advisor import Window
from fastmon.common.phases import PHASES

# name -> the package it needs; prometheus is served (fastmon.prometheus), not written to
TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "prometheus": "prometheus_client"}
LOG_EVERY = 5.0  # seconds between two points of each series
# The script's W&B or MLflow run is reported by the probe every 50 steps: this many steps
# pass before fastmon decides the script has none and opens a run of its own.
WAIT_FOR_SCRIPT_STEPS = 120
PREFIX = "fastmon/"
METRICS_PORT = 9464  # --log-to prometheus: /metrics's default port, OpenTelemetry's Prometheus exporter's
CLOSE_WAIT_S = 4.0  # at the end, how long all trackers together may take to take their last points


def parse_log_to(text: str) -> list[str]:
    """``tensorboard,wandb`` -> the names; ValueError naming an unknown one."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise ValueError(f"unknown tracker {', '.join(map(repr, unknown))}: --log-to takes "
                         f"{', '.join(TRACKERS)}")
    return list(dict.fromkeys(names))


def missing_packages(names: list[str]) -> list[str]:
    """The one-line notes for trackers whose package is not installed."""
    return [f"--log-to {name}: the {TRACKERS[name]} package is not installed here, so nothing is sent there "
            f"(pip install {TRACKERS[name]})" for name in names if importlib.util.find_spec(TRACKERS[name]) is None]


def figures(rows: list, gpus: list[dict] | None, compute: dict) -> dict[str, float]:
    """One point of each series from the steps since the last point (rank 0's)."""
    window = Window.from_rows(rows)
    out = {"step_ms": window.step_median * 1e3,
           "samples_per_s": window.samples_per_s, "steps_per_s": window.steps_per_s}
    if window.timed_steps:
        out.update({f"share/{p}": window.share(p) for p in PHASES})
    for gpu in gpus or []:
        if gpu.get("util") is not None:
            out[f"gpu{gpu['index']}/util"] = float(gpu["util"])
        if gpu.get("mem_used") is not None:
            out[f"gpu{gpu['index']}/memory_used_mib"] = gpu["mem_used"] / 2**20
    if compute.get("tflops_per_s") is not None:
        out["tflops_per_s"] = compute["tflops_per_s"]
    if compute.get("mfu") is not None:
        out["mfu"] = compute["mfu"]
    return {PREFIX + k: float(v) for k, v in out.items()}


class TensorBoardTarget:
    """Event files in a ``fastmon`` folder inside the script's own log folder (TensorBoard
    shows it as a run beside the script's), or in the run folder when the script writes none."""

    name = "tensorboard"
    modules = ("torch.utils.tensorboard",)

    def __init__(self) -> None:
        self.writer = None

    def ready(self, trackers: dict, waited: bool) -> bool:
        return "tensorboard" in trackers or waited

    def open(self, trackers: dict, run_dir: Path) -> str:
        from torch.utils.tensorboard import SummaryWriter

        script = trackers.get("tensorboard")
        folder = Path(script[0]) / "fastmon" if script else run_dir / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(folder))
        return f"TensorBoard: {folder}" + ("" if script else " (the script writes no TensorBoard events)")

    def write(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class WandbTarget:
    """A run of fastmon's own beside the script's: same project, its group (or the script
    run's id as the group), named "<script run>-fastmon", offline when the script's is.
    W&B lets two processes write one run only in its online "shared" mode, and fastmon's
    steps would fight the script's over the run's step counter."""

    name = "wandb"
    modules = ("wandb",)

    def __init__(self) -> None:
        self.run = None

    def ready(self, trackers: dict, waited: bool) -> bool:
        return "wandb" in trackers or waited

    def open(self, trackers: dict, run_dir: Path) -> str:
        import wandb

        script = trackers.get("wandb")
        if script:
            settings = dict(project=script["project"], entity=script["entity"],
                            group=script["group"] or script["id"], name=f"{script['name'] or script['id']}-fastmon",
                            dir=script["root_dir"], mode="offline" if script["offline"] else None)
        else:
            settings = dict(project=os.environ.get("WANDB_PROJECT") or "fastmon", name=run_dir.name)
        # Silent and off the console: the monitor's terminal is the dashboard's. No system
        # stats or code: the script's run has those.
        quiet = wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_code=True,
                               disable_git=True)
        self.run = wandb.init(job_type="fastmon", config={"fastmon_run": str(run_dir)}, reinit="create_new",
                              settings=quiet, **{k: v for k, v in settings.items() if v is not None})
        return f"W&B: run {self.run.name} ({self.run.id})" + (
            f" in group {settings['group']}, beside the script's" if script else " (the script has no W&B run)")

    def write(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()


class MlflowTarget:
    """The script's active MLflow run, through its tracking URI (runs take metrics from any
    process); a run of fastmon's own where the script has none."""

    name = "mlflow"
    modules = ("mlflow.tracking", "mlflow.entities")

    def __init__(self) -> None:
        self.client = None
        self.run_id = None
        self.own_run = False

    def ready(self, trackers: dict, waited: bool) -> bool:
        return "mlflow" in trackers or waited

    def open(self, trackers: dict, run_dir: Path) -> str:
        from mlflow.tracking import MlflowClient

        script = trackers.get("mlflow")
        if script:
            self.client, self.run_id = MlflowClient(tracking_uri=script["tracking_uri"]), script["run_id"]
            return f"MLflow: the script's run {self.run_id}"
        self.client = MlflowClient()
        run = self.client.create_run(experiment_id="0", run_name=run_dir.name)
        self.run_id, self.own_run = run.info.run_id, True
        return f"MLflow: run {self.run_id} (the script has no active MLflow run)"

    def write(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def close(self) -> None:
        if self.own_run:  # the script's run is the script's to end
            self.client.set_terminated(self.run_id)


TARGETS = {"tensorboard": TensorBoardTarget, "wandb": WandbTarget, "mlflow": MlflowTarget}


class TrackerLog:
    """The points of fastmon's series, and the trackers they go to. ``tick`` takes the
    steps since the last point; a tracker opens once it knows where to write (the script's
    run, or no sign of one after WAIT_FOR_SCRIPT_STEPS steps) and is sent every point so
    far, so nothing made before it opened is lost. ``note`` says what happened, a line each;
    a tracker that fails is noted and dropped: the training and the other trackers go on.
    Each tracker is called from a thread of its own: one that does not answer (a tracking
    server that hangs) holds nothing else, and ``close`` waits for them CLOSE_WAIT_S at most."""

    def __init__(self, names: list[str], run_dir: Path, note) -> None:
        self.run_dir = run_dir
        self.note = note
        self.targets = [TARGETS[name]() for name in names if name in TARGETS and importlib.util.find_spec(TRACKERS[name])]
        self.sent = {target.name: None for target in self.targets}  # None until opened, then points sent
        self.points: list[tuple[int, dict[str, float]]] = []
        self.last_step = 0
        self._latest: tuple[dict, bool] = ({}, False)  # the trackers the script uses, and whether waited for
        self._jobs = {target.name: queue.SimpleQueue() for target in self.targets}
        self._busy = {target.name: threading.Event() for target in self.targets}  # a job queued or running
        self._threads = {target.name: threading.Thread(target=self._serve, args=(target,), daemon=True,
                                                       name=f"fastmon-{target.name}") for target in self.targets}
        for target in self.targets:  # imported at once, on its thread: seconds, not paid at the end
            self._jobs[target.name].put((lambda t=target: [importlib.import_module(m) for m in t.modules], ()))
        for thread in self._threads.values():
            thread.start()

    def tick(self, rows: list, gpus, compute: dict, trackers: dict, final: bool = False) -> None:
        """Never waits for a tracker: each takes the points on its own thread, when it can."""
        rows = [r for r in rows if r.step > self.last_step]
        if rows:
            self.points.append((rows[-1].step, figures(rows, gpus, compute)))
            self.last_step = rows[-1].step
        waited = final or self.last_step >= WAIT_FOR_SCRIPT_STEPS
        self._latest = (dict(trackers), waited)
        for target in self.targets:
            busy = self._busy[target.name]
            if not busy.is_set():  # one still sending takes the newer points at its next job
                busy.set()
                self._jobs[target.name].put((self._send, (target, *self._latest)))

    def _serve(self, target) -> None:
        jobs = self._jobs[target.name]
        while True:
            job = jobs.get()
            if job is None:
                return
            work, args = job
            try:
                work(*args)
            except Exception as exc:  # a tracker's failure is its own
                self.note(f"--log-to {target.name} failed, nothing more is sent there: {type(exc).__name__}: {exc}")
                self.sent[target.name] = -1
                return
            finally:
                self._busy[target.name].clear()

    def _send(self, target, trackers: dict, waited: bool) -> None:
        if self.sent[target.name] is None:
            if not target.ready(trackers, waited):
                return
            self.note(f"--log-to {target.name}: {target.open(trackers, self.run_dir)}")
            self.sent[target.name] = 0
        points = self.points[self.sent[target.name]:]
        for step, values in points:
            target.write(step, values)
        self.sent[target.name] += len(points)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Each tracker's last points and its end, within ``wait_s`` for all of them; a
        tracker that has not finished by then is named, and left (its thread dies with
        fastmon)."""
        deadline = time.monotonic() + wait_s
        for target in self.targets:
            if self.sent[target.name] != -1:
                self._jobs[target.name].put((self._close, (target,)))
            self._jobs[target.name].put(None)
        late = []
        for target in self.targets:
            thread = self._threads[target.name]
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                late.append(target.name)
        for name in late:
            self.note(f"--log-to {name} did not answer within {wait_s:g} s of the training's end: its last "
                      f"points may be missing there (the record has them)")

    def _close(self, target) -> None:
        trackers, _ = self._latest
        self._send(target, trackers, True)  # the points a job still running could not take
        try:
            target.close()
        except Exception as exc:
            self.note(f"--log-to {target.name}: closing failed: {type(exc).__name__}: {exc}")
