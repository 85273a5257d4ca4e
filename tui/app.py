"""The fastmon dashboard app, over a live session or a recorded run."""

from __future__ import annotations

import importlib
import os
import time

from textual import on, work
from textual.worker import get_current_worker
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widgets import Footer, Static

from fastmon.common.run_status import RunStatus
from fastmon.report import spawned_line
from fastmon.session import PROFILE_STEPS
from fastmon.tui.messages import ApplyAdvice, DismissAdvice, RunEnded
from fastmon.tui.screens.advice_screen import AdviceScreen
from fastmon.tui.screens.applied_screen import AppliedScreen
from fastmon.tui.screens.help_screen import HelpScreen
from fastmon.tui.screens.profile_screen import ProfileScreen
from fastmon.tui.screens.quit_screen import QuitScreen
from fastmon.tui.widgets.advice_list import AdviceList
from fastmon.tui.widgets.gpu_line import GpuLine
from fastmon.tui.widgets.gpu_panel import GpuPanel
from fastmon.tui.widgets.log_pane import LiveLine, LogPane
from fastmon.tui.widgets.panel import Panel
from fastmon.tui.widgets.outcome import Outcome
from fastmon.tui.widgets.position_bar import PositionBar
from fastmon.tui.widgets.rank_line import RankLine
from fastmon.tui.widgets.run_header import RunHeader

REDRAW_EVERY = 0.33  # seconds: charts redraw at 3 Hz whatever the step rate
# While the machine's cores are busy (CPU training on every core, DataLoader workers on
# every core), the dashboard's CPU would come out of the training's: 1 Hz then.
BUSY_REDRAW_EVERY = 1.0
TRAINING_POLL_S = 0.2  # how often the dashboard looks whether the training has ended
BUSY_CPU_PERCENT = 90  # mean over the cores in the latest host sample: busy from here...
CALM_CPU_PERCENT = 75  # ... until it falls below this (no flapping at the edge)
NARROW_WIDTH = 120
SHORT_HEIGHT = 36
TINY_HEIGHT = 28
SPAWN_NOTE_S = 30  # seconds on screen: it explains an empty dashboard
# Where the left column's panels sit, top to bottom: the modules in widgets/, each with its
# ``PANEL``. A new panel is its module and its name here (ARCHITECTURE.md, "A new panel, a worked example").
LEFT = ("step_breakdown", "shares_bar", "gpu_line")
BESIDE = ("gpu_panel", "host_panel")  # side by side under them, where there is room
# Shown by `l` in those panels' place, at their height, so the chart keeps its size (at 80
# columns, where they are hidden, in the chart's room): a view a user asks for, not a
# third panel squeezed beside them.
INSTEAD = ("pipeline_panel",)


class FastmonApp(App[str | None]):
    """Returns "detach" when the user detaches from a running training, else None."""

    CSS_PATH = "fastmon.tcss"
    TITLE = "fastmon"
    BINDINGS = [
        Binding("q", "quit_app", "Quit"),
        Binding("ctrl+c", "quit_app", "Quit", show=False, priority=True),
        Binding("a", "apply", "Apply"),
        Binding("d", "dismiss_advice", "Dismiss"),
        Binding("enter", "detail", "Detail", show=False),
        Binding("c", "applied", "Applied"),
        Binding("p", "pause", "Pause charts"),
        Binding("l", "pipeline", "Pipeline", show=False),  # in the help, as e and t
        Binding("s", "screenshot_svg", "Save SVG", show=False),
        Binding("e", "export", "Export trace", show=False),  # in the help: the footer is full at 80 columns
        Binding("t", "profile", "torch.profiler", show=False),
        Binding("question_mark", "help", "Help"),
        # Replay's scrubber: priority over the advice list, and only in replay (check_action).
        Binding("left", "scrub(-1)", "Step -", priority=True),
        Binding("right", "scrub(1)", "Step +", priority=True),
        Binding("shift+left", "scrub(-10)", show=False, priority=True),
        Binding("shift+right", "scrub(10)", show=False, priority=True),
        Binding("pageup", "scrub(-100)", show=False, priority=True),
        Binding("pagedown", "scrub(100)", show=False, priority=True),
        Binding("home", "scrub_to(0)", show=False, priority=True),
        Binding("end", "scrub_to(-1)", show=False, priority=True),
    ]

    def __init__(self, source, session=None, exit_on_finish: bool = False) -> None:
        super().__init__()
        self.source = source
        self.session = session
        self.exit_on_finish = exit_on_finish
        self.paused = False
        self.pipeline_view = False  # `l`: the data pipeline in the GPU and host panels' place
        self.snapshot = None
        self.stopping = False
        self.redraws = 0
        self.redraw_every = REDRAW_EVERY
        self._redraw_timer = None
        self._shown: dict = {}  # panel id -> the signature it was last drawn at
        self._panels: list[Panel] | None = None  # the mounted panels, found at the first redraw
        self._captures_seen = len(source.events("profile"))  # a live run's new ones open as they come
        self._spawns_seen = 0

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        if self.source.replay:
            yield PositionBar(id="position")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield from placed(LEFT)
                with Horizontal(id="panels"):
                    yield from placed(BESIDE)
                yield from placed(INSTEAD)
            with Vertical(id="right"):
                yield Outcome(id="outcome")
                yield Static("Advice  (enter: detail" + (" · a: apply · d: dismiss" if self.commands else "")
                             + ")", classes="title")
                yield AdviceList(id="advice")
                yield Static("Output", classes="title", id="log-title")
                yield LogPane(id="log")
                yield LiveLine(id="live-line", classes="-empty")
        yield RankLine(id="ranks")
        yield Footer()

    def on_mount(self) -> None:
        self._layout_for(self.size.width, self.size.height)
        self._redraw_timer = self.set_interval(REDRAW_EVERY, self.redraw)
        self.redraw()
        if self.session is not None:
            self.wait_for_training()

    def on_resize(self, event) -> None:
        if self.screen_stack:  # (a resize can arrive while the app closes)
            self._layout_for(event.size.width, event.size.height)

    def _layout_for(self, width: int, height: int) -> None:
        base = self.screen_stack[0]
        base.set_class(width < NARROW_WIDTH, "narrow")
        base.set_class(height < SHORT_HEIGHT, "short")
        base.set_class(height < TINY_HEIGHT, "tiny")
        base.set_class(self.pipeline_view, "pipeline")  # the CSS swaps the views
        if self.snapshot is not None:
            try:
                self._place_gpu(base, bool(self.snapshot.gpu))
            except NoMatches:
                pass

    # --- drawing ----------------------------------------------------------------------
    def redraw(self) -> None:
        if not self.screen_stack:
            return  # the app has closed: a timer's last tick came after its screens went
        try:
            self._redraw()
        except NoMatches:
            pass  # the app is closing: a timer's tick or the run's end came while its widgets go

    def _redraw(self) -> None:
        base = self.screen_stack[0]  # the dashboard, drawn on behind any dialog
        log = base.query_one(LogPane)
        again, chunks = self.source.new_output()
        if again:
            log.start_over()
        if chunks or again:
            log.add(chunks)
            base.query_one(LiveLine).show(*log.live)
        if not self.source.replay:
            self._show_new_captures()
        self._show_new_spawns()
        snap = self.source.snapshot()
        if self.stopping and snap.status == RunStatus.RUNNING:
            snap.status = RunStatus.STOPPING
        if self.session is not None:
            self._pace(snap)
        base.query_one(RunHeader).show(snap, busy_redraw=self.redraw_every == BUSY_REDRAW_EVERY, paused=self.paused)
        if self.source.replay:
            base.query_one(PositionBar).show(self.source.position, self.source.length)
        if self.paused:
            return  # the header goes on: a paused dashboard must not look hung
        self.snapshot = snap
        # Rendering, not computing, is what costs: a panel is redrawn only when what it
        # shows has changed (the host panel at the sampler's rate, advice at the advisor's).
        if self._panels is None:
            self._panels = [widget for widget in base.walk_children() if isinstance(widget, Panel)]
        with self.batch_update():
            for panel in self._panels:
                if self._changed(panel.panel_id, panel.signature(snap)):
                    panel.show(snap)
            if self._changed("has-gpu", bool(snap.gpu)):
                self._place_gpu(base, bool(snap.gpu))
        self.redraws += 1

    def _place_gpu(self, base, has_gpu: bool) -> None:
        """The GPU panel where there is a GPU and room; the one-line form where there is no
        room or the pipeline view has its place; on a machine without one, one dim line
        saying why, and the host panel's width."""
        base.query_one(GpuPanel).display = has_gpu
        base.query_one(GpuLine).display = not has_gpu or base.has_class("narrow") or base.has_class("pipeline")

    def _pace(self, snap) -> None:
        cores = snap.host.get("cpu_per_core") or []
        load = sum(cores) / len(cores) if cores else 0.0
        threshold = CALM_CPU_PERCENT if self.redraw_every == BUSY_REDRAW_EVERY else BUSY_CPU_PERCENT
        every = BUSY_REDRAW_EVERY if snap.status == RunStatus.RUNNING and load >= threshold else REDRAW_EVERY
        if every != self.redraw_every:
            self._redraw_timer.stop()
            self._redraw_timer = self.set_interval(every, self.redraw)
            self.redraw_every = every

    def _changed(self, key: str, signature) -> bool:
        if self._shown.get(key) == signature:
            return False
        self._shown[key] = signature
        return True

    # --- the training process ----------------------------------------------------------
    @work(thread=True, exclusive=True, group="training")
    def wait_for_training(self) -> None:
        # Polled: the app's exit waits for its thread workers, and one blocked in a wait for
        # the training held a detach (q q) until the training had ended.
        worker = get_current_worker()
        while self.session.proc.poll() is None:
            if worker.is_cancelled:
                return
            time.sleep(TRAINING_POLL_S)
        self.post_message(RunEnded(self.session.wait()))

    def on_run_ended(self, message: RunEnded) -> None:
        try:
            log = self.query_one(LogPane)
            log.add(self.source.new_output()[1])
            log.flush_partial()
            self.query_one(LiveLine).show(*log.live)
        except NoMatches:
            return  # the app is closing already: its widgets go one by one
        self.paused = False
        self.redraw()
        if self.exit_on_finish or self.stopping:
            self.exit(None)
        else:
            self.notify(f"The script ended with exit code {message.exit_code}. q quits.",
                        severity="information" if message.exit_code == 0 else "error", timeout=8)

    @property
    def running(self) -> bool:
        return self.session is not None and self.session.view.status == RunStatus.RUNNING

    @property
    def commands(self):
        """Who takes a and d: the session this app runs, or the monitor a watch follows."""
        return self.session if self.session is not None else getattr(self.source, "commands", None)

    @property
    def commandable(self) -> bool:
        """A running training whose advice a and d reach."""
        if self.session is not None:
            return self.running
        return self.commands is not None and self.snapshot is not None and self.snapshot.status == RunStatus.RUNNING

    # --- actions ----------------------------------------------------------------------
    def action_quit_app(self) -> None:
        if not self.running:
            self.exit(None)
            return
        if isinstance(self.screen, QuitScreen):  # Ctrl-C again: its app-wide binding comes first
            self.screen.action_choose("stop")
            return

        def chosen(choice: str | None) -> None:
            if choice == "stop":
                self.stopping = True
                self.session.interrupt()
                self.notify("Stopping the training (Ctrl-C sent)…")
            elif choice == "detach":
                self.exit("detach")

        self.push_screen(QuitScreen(), chosen)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.notify("Charts paused (training continues)" if self.paused else "Charts resumed", timeout=2)
        self.redraw()

    def action_pipeline(self) -> None:
        self.pipeline_view = not self.pipeline_view
        self._layout_for(self.size.width, self.size.height)

    def action_screenshot_svg(self) -> None:
        """The screen as an SVG in the run's folder (Textual's own default is ~/Downloads,
        which a server may not have)."""
        try:
            path = self.save_screenshot(filename=f"screen-{time.strftime('%Y%m%d-%H%M%S')}.svg",
                                        path=str(self.source.run_dir))
            os.chmod(path, 0o600)  # as everything else in the run folder: what the script printed is on it
        except OSError as exc:
            self.notify(f"Could not save the screen: {exc}", severity="error")
            return
        self.notify(f"Screen saved: {path}", timeout=8)

    def action_export(self) -> None:
        self.notify("Writing the trace…", timeout=2)
        self.export_trace()

    @work(thread=True, exclusive=True, group="export")
    def export_trace(self) -> None:
        """The run's record as a Chrome trace in its folder; a live run's, as far as it is written."""
        from fastmon.trace_export import export

        try:
            out, steps = export(self.source.run_dir)
        except Exception as exc:  # a full disk, a record being replaced: said, never a crash
            self.call_from_thread(self.notify, f"Could not write the trace: {exc}", severity="error")
            return
        self.call_from_thread(self.notify, f"Trace written: {out} ({steps:,} steps) — open it in ui.perfetto.dev "
                              "or chrome://tracing", timeout=10)

    def action_profile(self) -> None:
        if self.source.replay or not self.running:
            captures = self.source.events("profile")
            if not captures:
                self.notify("No torch.profiler capture in this run: t while a run goes, or "
                            "fastmon run --profile-at STEP", severity="warning")
                return
            self.push_screen(ProfileScreen([c for c in captures if c["first"] == captures[-1]["first"]]))
            return
        self.command(self.session.profile, PROFILE_STEPS, f"torch.profiler: capturing the next {PROFILE_STEPS} "
                     "steps; the findings open here when they are ready.", "Not profiling now")

    def _show_new_spawns(self) -> None:
        spawned = self.source.events("spawned_training")
        for event in spawned[self._spawns_seen:]:
            line = spawned_line(event)
            self.notify(line[0].upper() + line[1:] + ".", severity="warning", timeout=SPAWN_NOTE_S)
        self._spawns_seen = len(spawned)

    def _show_new_captures(self) -> None:
        captures = self.source.events("profile")
        if len(captures) > self._captures_seen and not isinstance(self.screen, ProfileScreen):
            self.push_screen(ProfileScreen(captures[self._captures_seen:]))
            self._captures_seen = len(captures)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(replay=self.source.replay, watching=self.source.replay and bool(self.commands)))

    def _selected(self) -> dict | None:
        advice_id = self.query_one(AdviceList).selected_id
        if advice_id is None or self.snapshot is None:
            return None
        return next((a for a in self.snapshot.advice if a["id"] == advice_id), None)

    def _can_apply(self, advice: dict) -> bool:
        return bool(advice.get("apply")) and self.commandable and advice.get("status") == "open"

    def action_detail(self) -> None:
        advice = self._selected()
        if advice is None:
            return

        def chosen(choice: str | None) -> None:
            if choice == "apply":
                self.post_message(ApplyAdvice(advice["id"]))
            elif choice == "dismiss":
                self.post_message(DismissAdvice(advice["id"]))

        self.push_screen(AdviceScreen(advice, self._can_apply(advice)), chosen)

    @on(AdviceList.OptionSelected)
    def _open_detail(self) -> None:
        self.action_detail()

    def action_apply(self) -> None:
        advice = self._selected()
        if advice is not None:
            self.post_message(ApplyAdvice(advice["id"]))

    def action_dismiss_advice(self) -> None:
        advice = self._selected()
        if advice is not None:
            self.post_message(DismissAdvice(advice["id"]))

    def action_applied(self) -> None:
        self.push_screen(AppliedScreen(self.snapshot.applied if self.snapshot else []))

    def on_apply_advice(self, message: ApplyAdvice) -> None:
        advice = next((a for a in (self.snapshot.advice if self.snapshot else []) if a["id"] == message.advice_id), None)
        if advice is None or not advice.get("apply"):
            self.notify("This advice is a code change: enter shows how to fix it.", severity="warning")
        elif not self.commandable:
            self.notify("The training is not running: nothing to apply to.", severity="warning")
        elif advice.get("status") != "open":
            self.notify(f"{advice['id']} is {advice.get('status')}.", severity="warning")
        else:
            self.command(self.commands.apply, message.advice_id, f"Applying {message.advice_id}: measuring before "
                         "and after…", f"Not applying {message.advice_id} now")

    def on_dismiss_advice(self, message: DismissAdvice) -> None:
        if self.commands is not None:
            self.command(self.commands.dismiss, message.advice_id, None, "Not dismissed")

    @work(thread=True, group="commands")
    def command(self, send, argument, started: str | None, refused_as: str) -> None:
        """A command to the session, answered on its state owner's thread: never on the
        app's loop, which goes on drawing meanwhile."""
        refused = send(argument)
        if refused:
            self.call_from_thread(self.notify, f"{refused_as}: {refused}.", severity="warning")
        elif started:
            self.call_from_thread(self.notify, started)
        self.call_from_thread(self.redraw)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action in ("scrub", "scrub_to"):
            return self.source.replay and self.screen is self.screen_stack[0]
        if action in ("apply", "dismiss_advice"):
            return self.commands is not None
        return True

    def action_scrub(self, delta: int) -> None:
        self.source.move(delta)
        self.redraw()

    def action_scrub_to(self, position: int) -> None:
        self.source.jump(self.source.length if position < 0 else 1)
        self.redraw()


def placed(modules: tuple[str, ...]) -> list[Panel]:
    """The panels of ``modules`` (names in fastmon.tui.widgets), made with their CSS ids."""
    panels = [importlib.import_module(f"fastmon.tui.widgets.{name}").PANEL for name in modules]
    return [panel(id=panel.panel_id) for panel in panels]
