"""``--log-to prometheus``: the run's live figures at ``/metrics``, for the cluster's own
Prometheus (and Grafana), through ``prometheus_client``, rendered at most once a second
(``RENDER_EVERY``) and served from that. A rendering reads the session's published view,
which nothing changes once published: the HTTP threads take none of the session's locks
and never touch the state the monitor's owner thread changes. docs/integrations.md
"Prometheus" lists the metrics."""

from __future__ import annotations

import errno
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from fastmon.advisor import Window, recent
from fastmon.common.phases import PHASES
from fastmon.common.verdicts import kept_faster, params_text
from fastmon.summary import busy_during, current_rows, judge, rank_table, window_summary

RECENT_STEPS = 200  # the steps the phase shares and the verdict are of: the run as it is now
RENDER_EVERY = 1.0  # seconds: /metrics is rendered at most this often, and served from that
LABELS = ("run", "node", "rank")


class Metrics:
    """A prometheus_client collector over ``view_of()`` (a ``LiveView``), labelled with the
    run folder's name and the node. Only this node's ranks (``own(rank)``): node 0's monitor
    also holds the other nodes' ranks live, and those nodes serve them themselves."""

    def __init__(self, view_of: Callable, run: str, node: str, own: Callable = lambda rank: True) -> None:
        self.view_of, self.run, self.node, self.own = view_of, run, node, own

    def collect(self):
        view = self.view_of()
        steps = CounterMetricFamily("fastmon_steps", "Training steps ended", labels=LABELS)
        samples = CounterMetricFamily("fastmon_samples", "Samples the training took from its loader", labels=LABELS)
        tokens = CounterMetricFamily("fastmon_tokens", "Token ids the training's forwards fed a language model",
                                     labels=LABELS)
        step_time = SummaryMetricFamily("fastmon_step_seconds", "Wall time of a training step", labels=LABELS)
        shares = GaugeMetricFamily("fastmon_phase_ratio", "Share of the recent steps' time in each phase",
                                   labels=(*LABELS, "phase"))
        verdict = GaugeMetricFamily("fastmon_bound", "What holds the run back now: 1 for the verdict in its label",
                                    labels=(*LABELS, "verdict"))
        gpu = view.gpu[-1][2] if view.gpu else []
        on_gpu = (view.facts.get("environment") or {}).get("accelerator") == "cuda"
        ranks, slowest = rank_table({rank: figures.rows for rank, figures in view.ranks.items()}, RECENT_STEPS)
        for rank, figures in sorted(view.ranks.items()):
            if not self.own(rank):
                continue
            labels = (self.run, self.node, str(rank))
            steps.add_metric(labels, figures.steps)
            samples.add_metric(labels, figures.samples)
            if figures.tokens is not None:
                tokens.add_metric(labels, figures.tokens)
            step_time.add_metric(labels, count_value=figures.steps, sum_value=figures.wall)
            rows = recent(current_rows(list(figures.rows), list(view.applied), figures.left_out), RECENT_STEPS)
            window = Window.from_rows(rows)
            if not window.steps:
                continue
            for phase in PHASES:
                shares.add_metric((*labels, phase), window.share(phase))
            # as the status line and the dashboard judge it: the straggler's steps where the
            # ranks wait for one, on its own GPU, over these steps
            said = judge(window_summary(window), ranks, slowest, busy_during(list(view.gpu), rows), on_gpu).bound
            if said is not None:
                verdict.add_metric((*labels, said[0]), 1)
        yield from (steps, samples, tokens, step_time, shares, verdict)
        yield from self._devices(gpu)
        yield self._changes(view.applied)

    def _devices(self, gpu: list[dict]):
        busy = GaugeMetricFamily("fastmon_gpu_busy_ratio", "GPU utilization (NVML): time a kernel ran",
                                 labels=("run", "node", "gpu"))
        used = GaugeMetricFamily("fastmon_gpu_memory_used_bytes", "GPU memory in use (NVML)",
                                 labels=("run", "node", "gpu"))
        # NVML GPM's, on GPUs that have it (Hopper and later): what the SMs did, not only whether a kernel ran
        gpm = {key: GaugeMetricFamily(f"fastmon_gpu_{key}_ratio", text, labels=("run", "node", "gpu"))
               for key, text in (("sm_active", "Share of the SMs with work (NVML GPM, DCGM's SM_ACTIVE)"),
                                 ("sm_occupancy", "Warps resident on the SMs over their maximum (NVML GPM)"),
                                 ("tensor_active", "Time the tensor pipes were busy (NVML GPM)"))}
        for device in gpu:
            labels = (self.run, self.node, str(device.get("index", 0)))
            if device.get("util") is not None:
                busy.add_metric(labels, device["util"] / 100)
            if device.get("mem_used") is not None:
                used.add_metric(labels, device["mem_used"])
            for key, family in gpm.items():
                if device.get(key) is not None:
                    family.add_metric(labels, device[key] / 100)
        return busy, used, *gpm.values()

    def _changes(self, applied):
        kept = GaugeMetricFamily("fastmon_change_speedup_ratio",
                                 "A change fastmon applied live and kept: its measured speed-up (samples/s after/before)",
                                 labels=("run", "node", "change", "setting"))
        for result in applied:
            if kept_faster(result) and result.get("speedup"):
                kept.add_metric((self.run, self.node, result["id"], params_text(result.get("params") or {})),
                                result["speedup"])
        return kept


class _Rendered:
    """The registry's text, rendered at most once every ``RENDER_EVERY`` s however often it
    is scraped: a scrape flood costs the monitor a copy, not a collection each."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._text = b""
        self._at = -RENDER_EVERY

    def text(self) -> bytes:
        with self._lock:
            if time.monotonic() - self._at >= RENDER_EVERY:
                self._text = generate_latest(self._registry)
                self._at = time.monotonic()
            return self._text


class _MetricsHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.partition("?")[0] not in ("/metrics", "/"):
            self.send_error(404)
            return
        body = self.server.rendered.text()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:
        pass  # a scrape is not the monitor's news


def _listen(port: int, rendered: _Rendered) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("", port), _MetricsHandler)
    server.daemon_threads = True
    server.rendered = rendered
    threading.Thread(target=server.serve_forever, name="fastmon-metrics", daemon=True).start()
    return server


def serve(view_of: Callable, run: str, node: str, port: int,
          own: Callable = lambda rank: True) -> tuple[object, int, str | None]:
    """Serve /metrics on ``port`` (0: a free one); a port taken gives a free one and a note.
    Returns (the server, the port it listens on, the note or None)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Metrics(view_of, run, node, own))
    rendered = _Rendered(registry)
    note = None
    try:
        server = _listen(port, rendered)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        server = _listen(0, rendered)
        note = f"port {port} is taken (another run?)"
    return server, server.server_address[1], note
