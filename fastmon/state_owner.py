"""The one thread that changes the monitor's state. The channel, the output pumps, the
samplers and the screens' commands post work to it; it runs that work in order, its own
timed work (the advisor) between, and publishes an immutable view for the screens.
Nothing else writes the state, so no lock guards it (ARCHITECTURE.md, "One owner for the monitor's state")."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Callable

ASK_TIMEOUT_S = 30.0  # a command the owner has not started by then is answered "busy" (and never runs)


class Busy(Exception):
    """The owner did not run a command in time (or has stopped)."""


class StateOwner:
    def __init__(self, publish: Callable[[], None], on_error: Callable[[str, BaseException], None],
                 publish_every: float = 0.1) -> None:
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._publish = publish
        self._on_error = on_error
        self._publish_every = publish_every
        self._timers: list[list] = []  # [due, every, work]
        self._dirty = False
        self._published_at = 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fastmon-state")

    def start(self) -> None:
        self._thread.start()

    def every(self, seconds: float, work: Callable[[], None]) -> None:
        """Run ``work`` on the owner's thread every ``seconds`` (set before ``start``)."""
        self._timers.append([time.monotonic() + seconds, seconds, work])

    def post(self, work: Callable, *args) -> None:
        """Run ``work(*args)`` on the owner's thread, after what was posted before."""
        if not self._stopped.is_set():
            self._inbox.put((work, args, None))

    def ask(self, work: Callable, *args, timeout: float = ASK_TIMEOUT_S):
        """Run ``work(*args)`` on the owner's thread and return what it returns, once the
        view shows its effect. Raises Busy if it has not started within ``timeout``: it then
        never runs, so the asker may ask again."""
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            # from the owner's own work, or before it starts / after it stops: no other writer then
            result = work(*args)
            self._publish()
            return result
        future: Future = Future()
        self._inbox.put((work, args, future))
        try:
            return future.result(timeout)
        except TimeoutError as exc:
            if future.cancel():  # not started: it never will be (the asker may try again)
                raise Busy(f"{getattr(work, '__name__', 'work')} was not run within {timeout:.0f} s") from exc
        return future.result()  # it has started: what it does is what the asker must hear

    def stop(self) -> None:
        """Run what was posted so far, publish, and end the thread."""
        if self._thread.is_alive():
            self._inbox.put((None, (), None))
            self._thread.join()
        self._stopped.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while True:
            try:
                item = self._inbox.get(timeout=self._wait())
            except queue.Empty:
                item = None
            while item is not None:
                work, args, future = item
                if work is None:
                    self._publish()
                    return
                self._do(work, args, future)
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    item = None
            self._run_timers()
            if self._dirty and time.monotonic() - self._published_at >= self._publish_every:
                self._publish_now()

    def _wait(self) -> float | None:
        now = time.monotonic()
        waits = [due - now for due, _, _ in self._timers]
        if self._dirty:
            waits.append(self._published_at + self._publish_every - now)
        return max(min(waits), 0.0) if waits else None

    def _do(self, work, args, future) -> None:
        if future is not None and not future.set_running_or_notify_cancel():
            return  # its asker was answered "busy"
        try:
            result = work(*args)
        except Exception as exc:  # never the owner's end: the work is reported and dropped
            self._dirty = True
            self._on_error(getattr(work, "__name__", "work"), exc)
            if future is not None:
                future.set_exception(exc)
            return
        self._dirty = True
        if future is not None:
            self._publish_now()  # the asker reads the view next: it shows what it asked for
            future.set_result(result)

    def _run_timers(self) -> None:
        now = time.monotonic()
        for timer in self._timers:
            due, every, work = timer
            if now >= due:
                timer[0] = now + every
                self._do(work, (), None)

    def _publish_now(self) -> None:
        try:
            self._publish()
        except Exception as exc:
            self._on_error("publish", exc)
        self._dirty = False
        self._published_at = time.monotonic()
