"""The publisher: ships records to the monitor from a daemon thread.

The training thread only appends tuples to a bounded deque (tens of nanoseconds). This
thread wakes every ``INTERVAL`` seconds, encodes what accumulated into one frame and
sends it on a non-blocking socket. A full buffer, a full socket or a vanished monitor
drop records and count them; training is never blocked and never sees an error.
"""

from __future__ import annotations

import collections
import os
import socket
import threading
import time

from fastmon import wire
from fastmon.phases import PHASES

INTERVAL = 0.1
MAX_QUEUED = 50_000
NS = 1e-9


def steps_from_wire(message: dict) -> list[list]:
    """Step rows as the monitor stores them (``STEP_FIELDS``, seconds) from the probe's
    compact form: (step, end_ns, wall_ns, *phase_ns, *counters)."""
    rank, perf0, wall0 = message["rank"], message["perf0"], message["wall0"]
    n = len(PHASES)
    out = []
    for step, end_ns, wall_ns, *rest in message["rows"]:
        out.append([rank, step, wall0 + (end_ns - perf0) * NS, wall_ns * NS,
                    *(v * NS for v in rest[:n]), *rest[n:]])
    return out


class Publisher:
    def __init__(self, path: str | None, rank: int) -> None:
        self.rank = rank
        self.queue: collections.deque = collections.deque()
        self.control: collections.deque = collections.deque()
        self.dropped = 0
        self._sock: socket.socket | None = None
        self._reader = wire.FrameReader()
        self._pending = b""
        self._stop = threading.Event()
        self._perf0 = time.perf_counter_ns()
        self._wall0 = time.time()
        if path:
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(path)
                sock.setblocking(False)
                self._sock = sock
            except OSError:
                self._sock = None
        self._thread = threading.Thread(target=self._run, name="fastmon-publisher", daemon=True)

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def start(self) -> None:
        self._thread.start()

    # --- training thread side -------------------------------------------------------
    def put(self, item) -> None:
        if len(self.queue) >= MAX_QUEUED:
            self.dropped += 1
        else:
            self.queue.append(item)

    def message(self, message: dict) -> None:
        """Anything that is not a step row (facts, events) goes in as a dict."""
        self.put(message)

    # --- publisher thread side ------------------------------------------------------
    def _drain(self) -> list[dict]:
        rows, messages = [], []
        queue = self.queue
        while queue:
            item = queue.popleft()
            if type(item) is tuple:
                rows.append(item)
            else:
                messages.append(item)
        if rows:
            # Integers (nanoseconds) encode fastest; the monitor converts them (steps_from_wire).
            messages.insert(0, {"t": "steps", "rank": self.rank, "perf0": self._perf0, "wall0": self._wall0,
                                "rows": rows})
        return messages

    def flush(self) -> None:
        messages = self._drain()
        if not messages:
            self._send_pending()
            return
        if self._sock is None:
            self.dropped += sum(len(m["rows"]) if m["t"] == "steps" else 1 for m in messages)
            return
        if self._pending:
            # The monitor is behind: never queue unboundedly, drop this batch.
            self._send_pending()
            if self._pending:
                self.dropped += sum(len(m["rows"]) if m["t"] == "steps" else 1 for m in messages)
                return
        self._pending = b"".join(wire.encode(m) for m in messages)
        self._send_pending()

    def _send_pending(self) -> None:
        if not self._pending or self._sock is None:
            return
        try:
            sent = self._sock.send(self._pending)
            self._pending = self._pending[sent:]
        except BlockingIOError:
            pass
        except OSError:
            self._lose_connection()

    def _lose_connection(self) -> None:
        try:
            if self._sock is not None:
                self._sock.close()
        finally:
            self._sock = None
            self._pending = b""

    def _receive(self) -> None:
        if self._sock is None:
            return
        try:
            data = self._sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._lose_connection()
            return
        if not data:
            self._lose_connection()
            return
        try:
            self.control.extend(self._reader.feed(data))
        except ValueError:
            self._lose_connection()

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            try:
                self._receive()
                self.flush()
            except Exception:  # the publisher must never die loudly inside training
                self.dropped += 1

    def close(self, final: dict | None = None, timeout: float = 2.0) -> None:
        """Flush everything, best effort within ``timeout``; used at interpreter exit."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        if final is not None:
            final = dict(final, dropped=self.dropped)
            self.queue.append(final)
        self.flush()
        deadline = time.monotonic() + timeout
        while self._pending and self._sock is not None and time.monotonic() < deadline:
            time.sleep(0.005)
            self._send_pending()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def rank_from_env() -> tuple[int, int, int]:
    env = os.environ
    return int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1))
