"""Samplers that run in the monitor: psutil for the trainer, its DataLoader workers and
the system; NVML (nvidia-ml-py) for the GPUs. No NVML library, no driver, no GPU: the
GPU sampler says why in one line and returns nothing.

A child of the trainer is a DataLoader worker only when the probe named its pid (from the
iterators it watched); inductor's compile workers are ``compile``, anything else ``other``.
Workers share their parent's pages copy-on-write: their memory is PSS, not RSS."""

from __future__ import annotations

import time

import psutil


TREE_EVERY = 2.0  # seconds between walks of the process tree: each reads every process on the machine
# A child this young that the probe has not named yet may be a DataLoader worker whose pid
# is on its way (the probe says them once a publisher round): "starting", not "other".
NEW_CHILD_S = 3.0


class HostSampler:
    def __init__(self, root_pid: int, launcher: bool = False) -> None:
        self.root_pid = root_pid
        self.launcher = launcher  # the root is torchrun: its fastmon.probe children are the trainers
        self._roles: dict[int, tuple[psutil.Process, str]] = {}  # pid -> (process, role), children after parents
        self.worker_pids: set[int] = set()  # DataLoader workers, as the probe reports them
        self.trainer_pids: set[int] = set()  # the ranks, as their probes said hello (named so under attach)
        self._walked = float("-inf")
        psutil.cpu_percent(percpu=True)  # prime: the first reading is meaningless

    def _tracked(self) -> dict[int, tuple[psutil.Process, str]]:
        """The trainer's process tree, walked again every TREE_EVERY seconds (psutil finds
        children by reading /proc for every process: ~20 µs each, milliseconds on a busy
        node); in between, the processes already found. A new DataLoader worker shows
        up within TREE_EVERY; one that exits leaves at the next sample."""
        now = time.monotonic()
        if now - self._walked < TREE_EVERY:
            return self._roles
        self._walked = now
        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return self._roles
        known, trainers = {}, set()
        for proc in procs:
            try:
                proc, role = self._roles.get(proc.pid) or (proc, self._role(proc, trainers))
                if role == "trainer":
                    trainers.add(proc.pid)
            except psutil.Error:
                continue
            known[proc.pid] = (proc, role)
        self._roles = known
        return known

    def _role(self, proc: psutil.Process, trainers: set[int]) -> str:
        proc.cpu_percent()  # prime
        with proc.oneshot():
            cmdline, ppid = " ".join(proc.cmdline()), proc.ppid()
        # A forked DataLoader worker has its parent's command line: its parent decides.
        if proc.pid == self.root_pid and self.launcher:
            return "launcher"
        if "fastmon.probe" in cmdline and ppid not in trainers:
            return "trainer"
        if "compile_worker" in cmdline:
            return "compile"
        return "child"

    def role(self, proc: psutil.Process, walked_role: str) -> str:
        if walked_role != "child":
            return walked_role
        if proc.pid in self.trainer_pids:
            return "trainer"
        if proc.pid in self.worker_pids:
            return "worker"
        return "starting" if time.time() - proc.create_time() < NEW_CHILD_S else "other"

    def sample(self) -> dict:
        procs = []
        for pid, (proc, role) in list(self._tracked().items()):
            try:
                role = self.role(proc, role)
                with proc.oneshot():
                    if proc.status() == psutil.STATUS_ZOMBIE:  # exited, not reaped yet: its RSS reads 0
                        self._roles.pop(pid, None)
                        continue
                    entry = {"pid": pid, "cpu": proc.cpu_percent(), "rss": proc.memory_info().rss, "role": role}
                    if role == "worker":
                        entry["pss"] = _pss(proc)
                procs.append(entry)
            except psutil.Error:
                self._roles.pop(pid, None)
        memory = psutil.virtual_memory()
        return {
            "processes": procs,
            "cpu_per_core": psutil.cpu_percent(percpu=True),
            "ram_used": memory.total - memory.available,
            "ram_total": memory.total,
        }


# What the SMs do, from NVML's GPU performance monitoring (GPM: Hopper and later, no DCGM
# needed): "util" says only that some kernel ran in each period, GPM how much of the chip
# it kept busy. Percent, over the period between two samples.
GPM_METRICS = (("sm_active", "NVML_GPM_METRIC_SM_UTIL"), ("sm_occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY"),
               ("tensor_active", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"))


class GpuSampler:
    def __init__(self, nvml=None) -> None:
        """``nvml``: the pynvml module (a stand-in in tests); imported here by default."""
        self.available = False
        self.note = ""
        self.driver: str | None = None
        self.handles = []
        self.gpm: list[list | None] = []  # per device: [older sample, newer sample, primed], None without GPM
        try:
            if nvml is None:
                import pynvml as nvml
            self._nvml = nvml
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.driver = _text(nvml.nvmlSystemGetDriverVersion())
            self.gpm = [self._gpm_samples(h) for h in self.handles]
            self.available = count > 0
            self.note = "" if count else "NVML found no GPU on this machine"
        except ImportError:
            self.note = "no GPU panel: nvidia-ml-py is not installed"
        except Exception as exc:  # pynvml.NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.note = f"no GPU: NVML unavailable ({_nvml_reason(exc)}); CPU and host panels work"

    def sample(self, pids: set[int]) -> list[dict]:
        if not self.available:
            return []
        nvml = self._nvml
        out = []
        for index, handle in enumerate(self.handles):
            entry = {"index": index}
            for key, read in (
                ("name", lambda h: _text(nvml.nvmlDeviceGetName(h))),
                ("util", lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                ("mem_used", lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used),
                ("mem_total", lambda h: nvml.nvmlDeviceGetMemoryInfo(h).total),
                ("power_w", lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000),
                ("sm_clock", lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                ("mem_clock", lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
                ("temp_c", lambda h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
            ):
                try:
                    entry[key] = read(handle)
                except Exception:
                    entry[key] = None
            entry["gpm"] = self.gpm[index] is not None
            if entry["gpm"]:
                try:
                    entry.update(self._gpm_read(handle, self.gpm[index]))
                except Exception:
                    pass  # one period's reading lost; the next pair of samples reads again
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                entry["process_mem"] = sum(p.usedGpuMemory or 0 for p in procs if p.pid in pids)
                entry["our_process"] = any(p.pid in pids for p in procs)
            except Exception:
                entry["process_mem"] = None
            out.append(entry)
        return out

    def _gpm_samples(self, handle) -> list | None:
        """Two GPM sample buffers for a device that has GPM, else None."""
        nvml = self._nvml
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                return None
            return [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc(), False]
        except Exception:  # an NVML older than GPM, or a GPU without it
            return None

    def _gpm_read(self, handle, pair: list) -> dict:
        """The GPM metrics over the period since the last sample (none at the first)."""
        nvml = self._nvml
        older, newer, primed = pair
        nvml.nvmlGpmSampleGet(handle, newer)
        pair[:] = [newer, older, True]
        if not primed:
            return {}
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = older, newer
        for i, (_, metric) in enumerate(GPM_METRICS):
            request.metrics[i].metricId = getattr(nvml, metric)
        nvml.nvmlGpmMetricsGet(request)
        return {key: round(request.metrics[i].value, 1) for i, (key, _) in enumerate(GPM_METRICS)
                if request.metrics[i].nvmlReturn == nvml.NVML_SUCCESS}


def _pss(proc: psutil.Process) -> int | None:
    """Proportional set size: shared pages split among the processes that map them."""
    try:
        return getattr(proc.memory_full_info(), "pss", None) or None  # 0: an exiting process's empty maps
    except (psutil.Error, OSError):
        return None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_reason(exc: Exception) -> str:
    name = type(exc).__name__
    if "LibraryNotFound" in name:
        return "libnvidia-ml.so not found: no NVIDIA driver installed"
    if "DriverNotLoaded" in name:
        return "the NVIDIA driver is not loaded"
    return str(exc) or name
