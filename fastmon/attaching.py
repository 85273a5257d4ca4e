"""``fastmon.attach()``: the probe installed from inside a job fastmon did not start.

The first process of a job to call it starts the job's monitor (``fastmon.attached_monitor``,
one per node) and every rank connects to it. Which process starts it is decided by a lock
file keyed by the job: torchrun's run id and the launcher's pid under torchrun or
``accelerate launch``, the process's own pid otherwise. The lock and the monitor's address
(with the run's secret) lie in a folder of this user's alone.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
import tempfile

import psutil

from fastmon.attached_monitor import MONITOR_START_S
from fastmon.records import check_can_record

APPLY_CHOICES = ("never", "ask", "auto")  # ask: `fastmon watch` applies what you choose


class AttachError(Exception):
    pass


_failed: set[str] = set()  # the settings a call here could not attach with: said once, not again


def attach(apply: str = "never", allow=(), runs_dir: str = "fastmon-runs", status: bool = True,
           log_to=(), tokens_per_sample: int | None = None) -> str | None:
    """Watch this process as ``fastmon run`` would; returns the run folder (None where the
    monitor could not start: said on stderr, the script runs on unwatched). A second call,
    or a call under ``fastmon run``, does nothing."""
    if apply not in APPLY_CHOICES:
        raise ValueError(f"fastmon.attach(apply={apply!r}): one of {', '.join(APPLY_CHOICES)}")
    from fastmon.loggers import parse_log_to

    try:  # "tensorboard,wandb" as --log-to takes it, or a list of names
        log_to = parse_log_to(log_to if isinstance(log_to, str) else ",".join(log_to))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"fastmon.attach(log_to={log_to!r}): {exc}") from None
    from fastmon.probe import current

    if current() is not None or os.environ.get("FASTMON_CHANNEL"):
        return os.environ.get("FASTMON_RUN_DIR")
    settings = dict(apply=apply, allow=list(allow), runs_dir=os.path.abspath(runs_dir), status=status, log_to=log_to,
                    tokens_per_sample=tokens_per_sample, target=_target())
    key = json.dumps(settings, sort_keys=True)
    if key in _failed:
        return None
    try:
        check_can_record(runs_dir)
    except OSError as exc:
        _failed.add(key)
        sys.stderr.write(f"[fastmon] attach: cannot record in {runs_dir!r}: {exc.strerror or exc}; the script runs "
                         "unwatched (runs_dir= names another folder)\n")
        return None
    try:
        info = _job_monitor(settings)
    except (AttachError, OSError, ValueError, subprocess.SubprocessError) as exc:
        _failed.add(key)
        sys.stderr.write(f"[fastmon] attach: {exc}; the script runs unwatched\n")
        return None
    os.environ.update(FASTMON_CHANNEL=info["channel"], FASTMON_SECRET=info["secret"], FASTMON_RUN_DIR=info["run_dir"],
                      FASTMON_MONITOR_PID=str(info["monitor_pid"]))
    from fastmon.probe import install

    install(info["channel"])
    return info["run_dir"]


def _target() -> list[str]:
    """The script and its arguments, as `fastmon run` records them; in a Jupyter kernel,
    the notebook (its path where the server says it: JPY_SESSION_NAME)."""
    if sys.argv and os.path.basename(sys.argv[0]).startswith("ipykernel_launcher"):
        return [os.environ.get("JPY_SESSION_NAME") or "notebook"]
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return ["-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    return list(sys.argv) if sys.argv and sys.argv[0] else ["python"]


def _job() -> tuple[str, int, bool]:
    """The job's key, the process whose tree it is, and whether that is a launcher."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id is not None:  # torchrun's id is "none" unless set: its pid tells two jobs apart
        launcher = os.getppid()
        return f"torchrun-{_safe(run_id)}-{launcher}", launcher, True
    return f"pid-{os.getpid()}", os.getpid(), False


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:64]


def _private_folder() -> str:
    folder = os.path.join(tempfile.gettempdir(), f"fastmon-attach-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise AttachError(f"{folder} is not a folder of this user's alone")
    return folder


def _job_monitor(settings: dict) -> dict:
    """The address of the job's monitor, started here if no rank has started it yet."""
    key, root, launcher = _job()
    folder = _private_folder()
    info_path = os.path.join(folder, f"{key}.json")
    with open(os.path.join(folder, f"{key}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info = _read(info_path)
        monitor = info.get("monitor_pid") if info else None
        if not isinstance(monitor, int) or not psutil.pid_exists(monitor):
            _start_monitor(info_path, root, launcher, settings)
            info = _read(info_path)
            if info is None:
                raise AttachError("the monitor did not start")
    return info


def _start_monitor(info_path: str, root: int, launcher: bool, settings: dict) -> None:
    """Starts it detached (its own session, not this process's child: the script's Ctrl-C
    and its wait() for children never meet it); returns once it listens."""
    if os.path.exists(info_path):
        os.remove(info_path)
    command = [sys.executable, "-m", "fastmon.attached_monitor", "--info", info_path, "--root", str(root),
               *(["--launcher"] if launcher else []), "--settings", json.dumps(settings)]
    started = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=None if settings["status"] else subprocess.DEVNULL, timeout=MONITOR_START_S,
                             close_fds=True)
    if started.returncode != 0:
        raise AttachError(f"the monitor did not start (exit code {started.returncode})")


def _read(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
