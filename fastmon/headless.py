"""The headless mode: a status line every few seconds on stderr, the script's output
passing straight through around it, and the summary at the end."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

from fastmon.advisor import Window, recent
from fastmon.advisor.bound import DATA_BOUND_SHARE
from fastmon.advisor.types import SUGGESTION, gain_text
from fastmon.advisor.verdict import verdict
from fastmon.common.phases import PHASE_LABELS, PHASES
from fastmon.common.run_status import RunStatus
from fastmon.progress import progress, script_args
from fastmon.report import clock, gib, known, profile_lines, si, spawned_line, summary_text
from fastmon.summary import (busy_during, compiled_model, counted_samples, current_rows, first_count, flops_figures,
                             judge, lost_nodes, rank_table, window_summary)
from fastmon.common.verdicts import APPLYING, OPEN, result_text

STATUS_EVERY = 3.0
STATUS_WINDOW = 50


def status_line(view, argv: list[str] = ()) -> str:
    """The line for a session's ``view`` (fastmon.live_state.LiveView); ``argv``: the
    script's arguments (an --epochs there gives the ETA)."""
    rank0 = view.first_rank  # rank 0, but on a job's other nodes their first
    steps, rows = rank0.steps, rank0.rows
    gpu = view.gpu[-1][2] if view.gpu else None
    applying = [a for a in view.advice if a.get("status") == APPLYING]
    count = first_count(view.events)
    if not steps:
        # "0.0 steps/s" while the script imports and loads its data reads like a stall
        return (f"[fastmon] {clock(view.elapsed())} step 0 | no training step has ended yet "
                "(a step ends at optimizer.step())")
    shown = recent(current_rows(list(rows), list(view.applied), rank0.left_out), STATUS_WINDOW)
    window = Window.from_rows(shown)
    ranks, slowest = rank_table({rank: figures.rows for rank, figures in view.ranks.items()}, STATUS_WINDOW)
    judged = judge(window_summary(window), ranks, slowest, busy_during(list(view.gpu), shown),
                   (view.facts.get("environment") or {}).get("accelerator") == "cuda")
    # the shares the verdict reads: a straggler's own, where it is judged on them
    phases = judged.steps["phases"]
    shares = " ".join(f"{PHASE_LABELS[p]} {phases[p]:.0%}" for p in PHASES if phases[p] >= 0.005)
    if shares and judged.rank is not None:
        shares = f"rank {judged.rank}: {shares}"
    epoch, epochs, eta = progress(view.facts, list(argv), steps, window.steps_per_s, view.status == RunStatus.RUNNING)
    parts = [f"[fastmon] {clock(view.elapsed())} step {steps}"
             + (f" epoch {epoch}" + (f"/{epochs}" if epochs else "") if epoch else "")
             + (f" ETA {clock(eta)}" if eta is not None else ""),
             f"{window.steps_per_s:.1f} steps/s",
             f"{window.samples_per_s:,.0f} samples/s" if window.samples else "samples unknown"]
    if window.tokens_per_s is not None:
        parts.append(f"{window.tokens_per_s:,.0f} tokens/s")
    if shares:
        parts.append(shares)
    stages = (view.facts.get("pipeline_stages") or {}).get("stages")
    if stages and phases["data_wait"] >= DATA_BOUND_SHARE:  # waiting for data: on what, in the loader
        parts.append(f"loader's slowest: {stages[0]['name']} {stages[0]['wall_ms']:.2f} ms a sample"
                     + (" (waits)" if stages[0]["waiting"] else ""))
    lost = lost_nodes(view.events)
    if len(view.ranks) > 1:
        parts.append(f"{len(view.ranks)} ranks" + (f", straggler rank {slowest}" if slowest is not None else "")
                     + "".join(f", node {node} lost" for node in lost))
    expected = view.facts.get("job_nodes")
    if expected:
        linked = 1 + len({e["node"] for e in view.events_of("node_joined")} - set(lost))
        if linked < expected:
            parts.append(f"{linked} of {expected} nodes linked")
    if view.trainer_rss is not None:
        parts.append(f"RSS {view.trainer_rss / 2**30:.1f} GiB")
    if gpu:
        parts.append("GPU " + " ".join(map(device_status, gpu)))
    compute = flops_figures(count, counted_samples(count, rows), window.steps_per_s, window.samples_per_s,
                            view.facts)
    if compute["tflops_per_s"] is not None:
        parts.append(si(compute["tflops_per_s"] * 1e12, "FLOP/s")
                     + (f" MFU {compute['mfu']:.1%}" if compute["mfu"] is not None else ""))
    found = verdict(judged.bound, judged.steps["phases"], list(view.advice), list(view.applied), judged.gpu,
                    compiled_model(view.facts), judged.rank)
    if found:
        parts.append(found.issue)
    if applying:
        parts.append(f"trying {applying[0]['id']}")
    return " | ".join(parts)


def device_status(d: dict) -> str:
    """One GPU's latest sample: "97% SM 41% 12.0/79.6 GiB" (SM activity where it has GPM)."""
    sms = f" SM {d['sm_active']:.0f}%" if d.get("sm_active") is not None else ""
    return f"{known(d.get('util'), '%')}{sms} {gib(d.get('mem_used'))}/{gib(d.get('mem_total'))} GiB"


class StatusPrinter:
    def __init__(self, session, every: float = STATUS_EVERY) -> None:
        self.session = session
        self.every = every
        self._stop = threading.Event()
        self._seen_advice: set = set()
        self._seen_events = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="fastmon-status")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                line = status_line(self.session.view, script_args(self.session.options.target))
                self.session.output.say([line, *self._advice_news(), *self._event_news()])
            except Exception:  # the status line is a convenience: never take the run down
                pass

    def _not_tried_unless_allowed(self, advice) -> str:
        """Under --apply auto, a change that alters the maths waits for the user's word:
        where to give it (it was left untried, unsaid)."""
        options = self.session.options
        if options.apply != "auto" or not (advice.get("apply") or {}).get("changes_maths") \
                or advice["id"] in options.allow:
            return ""
        return f" (it changes the maths: --allow {advice['id']} lets --apply auto try it)"

    def _event_news(self) -> list[str]:
        events = self.session.view.events[self._seen_events:]
        self._seen_events += len(events)
        return ([f"[fastmon] {line}" for e in events if e.get("kind") == "profile" for line in profile_lines(e)]
                + [f"[fastmon] {spawned_line(e)}" for e in events if e.get("kind") == "spawned_training"])

    def _advice_news(self) -> list[str]:
        out = []
        for advice in self.session.view.advice:
            key = (advice["id"], advice.get("status"), (advice.get("result") or {}).get("exp"))
            if key in self._seen_advice:
                continue
            self._seen_advice.add(key)
            if advice.get("status") == OPEN and not advice.get("result"):
                gain = f" ({gain_text(advice['est_gain'])})" if advice.get("est_gain") else ""
                gain += " (a suggestion)" if advice.get("kind") == SUGGESTION else ""
                out.append(f"[fastmon] advice {advice['id']}: {advice['title']}{gain} — {advice['evidence']}"
                           + self._not_tried_unless_allowed(advice))
            elif advice.get("result"):
                out.append(f"[fastmon] {advice['id']}: {result_text(advice['result'])}")
        return out


def run_headless(options, status_every: float, web_port: int | None | bool = False) -> tuple[int, Path]:
    """A run with no dashboard, to its end: (its exit code, its folder). ``web_port``:
    False, or serve the run to a browser too (None: the default port)."""
    from fastmon.session import Session

    session = Session(options, passthrough=True)
    # Ctrl-C reaches the training process from the terminal directly; the monitor stays
    # to record its end. A no-op handler, not SIG_IGN: exec resets a handled signal to its
    # default, so the training process starts with Ctrl-C as python would, even while it
    # is still importing torch (an ignored one would be inherited). Started with Ctrl-C
    # ignored (nohup), fastmon leaves it so, and the training inherits that, as python's
    # would. SIGTERM is passed on, as torchrun does.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: session.terminate())
    session.start()
    sys.stderr.write(f"[fastmon] recording to {session.run_dir}\n")
    if session.gpu.note:
        sys.stderr.write(f"[fastmon] {session.gpu.note}\n")
    web = None
    if web_port is not False:  # its own process, as `fastmon watch --web` (it says where, on stderr)
        web = subprocess.Popen([sys.executable, "-m", "fastmon", "watch", "--web", str(session.run_dir),
                                *(["--port", str(web_port)] if web_port is not None else [])],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    printer = StatusPrinter(session, status_every)
    printer.start()
    code = session.wait()
    printer.stop()
    if web is not None:
        web.terminate()
        web.wait(10)
    sys.stderr.write("\n" + summary_text(session.run_dir) + "\n")
    return code, session.run_dir
