"""The publisher: ships the step event log and the probe's messages to the monitor from a
daemon thread.

The training thread appends step events (``fastmon.common.step_events``) to an ``array('q')``,
one atomic C call each, and the occasional fact or event dict to a bounded deque. This
thread waits on the socket (commands from the monitor are read as they arrive) and every
``INTERVAL`` seconds sends what accumulated on a non-blocking socket: the log as one
frame of its bytes (``fastmon.common.wire.encode_events``: no per-number encoding), each
message as a JSON frame. A log grown past ``MAX_LOG_INTS`` (the monitor gone quiet), a
full socket or a vanished monitor drop records: dropped messages are counted here, a
dropped stretch of the log is flagged ``gap`` on the next frame and the monitor counts
the steps it lost. Training is never blocked and never sees an error.
"""

from __future__ import annotations

import collections
import os
import select
import socket
import threading
import time
from array import array

from fastmon.common import wire

# s. Each round costs ~300-400 µs of the trainer's CPU, mostly holding the GIL (cold Python:
# wake-up, drain, encode, send; ~100 µs of it the wake-up alone; thread CPU time on ~3.5 ms
# steps), i.e. 0.03-0.04% of its time at one round a second. A killed trainer loses at most
# this much of its steps: the design's "at most the last second".
INTERVAL = wire.SEND_EVERY
MAX_QUEUED = 50_000  # messages
MAX_LOG_INTS = 1_000_000  # 8 MB of step events, some 50,000 steps


class Publisher:
    def __init__(self, path: str | None, rank: int, hello: dict | None = None) -> None:
        self.rank = rank
        self.log = array("q")
        self.put_event = self.log.extend
        self._gap = False  # part of the log was dropped since the last frame
        self.queue: collections.deque = collections.deque()
        self.control: collections.deque = collections.deque()
        self.on_control = lambda: None  # called on this thread after commands arrive
        self.on_lost = lambda: None  # called once the monitor is gone
        # Called on this thread with a stream's name when fastmon's own has lost its reader
        # (fastmon.script_output); True once this process let go of its read end.
        self.on_output_closed = lambda stream: False
        self.dropped = 0
        self._sock: socket.socket | None = None
        self._reader = wire.FrameReader()
        self._pending = b""
        self._stop = threading.Event()
        # close() writes here to end the thread's wait on the socket at once: the script's
        # exit waited up to INTERVAL for the select to time out (1 s of a short script's wall).
        self._wake_read, self._wake_write = os.pipe()
        self._perf0 = time.perf_counter_ns()
        self._wall0 = time.time()
        if path:
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(path)
                if hello is not None:  # at once: the monitor closes a connection not admitted soon
                    sock.settimeout(5.0)
                    sock.sendall(wire.encode(hello))
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
    def message(self, message: dict) -> None:
        """Anything that is not a step row (facts, events) goes in as a dict."""
        if len(self.queue) >= MAX_QUEUED:
            self.dropped += 1
        else:
            self.queue.append(message)

    def deliver(self, commands: list[dict]) -> None:
        """Commands from the monitor, for the training thread's next step boundary."""
        self.control.extend(commands)
        self.on_control()

    # --- publisher thread side ------------------------------------------------------
    def _drain(self) -> tuple[bytes, list[dict]]:
        """The event log's frame (empty: nothing logged) and the messages, taken out."""
        try:
            self.before_send()
        except Exception:
            pass  # the probe's own records: never a reason to stop sending
        messages = []
        pop_message = self.queue.popleft
        while self.queue:
            messages.append(pop_message())
        log = self.log
        count = len(log)
        events = b""
        # Appends only ever land at the end, and each event is one atomic extend: the
        # first ``count`` ints are whole events, whatever the training thread does now.
        if count > MAX_LOG_INTS:
            del log[:count]
            self._gap = True
        elif count or self._gap:
            events = wire.encode_events(log[:count], self.rank, self._perf0, self._wall0, self._gap)
            del log[:count]
            self._gap = False
        return events, messages

    def _drop(self, events: bytes, messages: list[dict]) -> None:
        if events:
            self._gap = True
        self.dropped += len(messages)

    def flush(self, final: dict | None = None) -> None:
        events, messages = self._drain()
        ending = [dict(final, dropped=self.dropped)] if final is not None else []
        if not events and not messages and not ending:
            self._send_pending()
            return
        if self._sock is None:
            self._drop(events, messages + ending)
            return
        if self._pending:
            # The monitor is behind: never queue unboundedly, drop this batch.
            self._send_pending()
            if self._pending:
                self._drop(events, messages + ending)
                return
        # The facts first: the steps' samples are read with the loaders' (fastmon.common.sample_count).
        self._pending = b"".join([wire.encode(m) for m in messages]) + events + b"".join(map(wire.encode, ending))
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
            try:
                self.on_lost()
            except Exception:
                pass

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
            commands = self._reader.feed(data)
        except ValueError:
            self._lose_connection()
            return
        for command in [c for c in commands if c.get("t") == "output_closed"]:
            commands.remove(command)
            self._output_closed(command.get("stream"))
        if commands:
            self.deliver(commands)

    def _output_closed(self, stream) -> None:
        try:
            let_go = self.on_output_closed(stream)
        except Exception:
            let_go = False
        if let_go:
            self.message({"t": "output_closed", "stream": stream})

    def _run(self) -> None:
        # The wait is on the socket itself: a command is read as soon as it arrives, and a
        # round makes no other system call unless there is something to send. Every call
        # that releases the GIL hands it back and forth with the training thread, which
        # then waits for this one.
        next_flush = time.monotonic() + INTERVAL
        while not self._stop.is_set():
            try:
                left = next_flush - time.monotonic()
                if left > 0:
                    if self._sock is None:
                        self._stop.wait(left)
                    else:
                        ready = select.select((self._sock, self._wake_read), (), (), left)[0]
                        if self._sock in ready:
                            self._receive()
                    continue
                next_flush = time.monotonic() + INTERVAL
                self.flush()
            except Exception:  # the publisher must never die loudly inside training
                self.dropped += 1
                self._stop.wait(INTERVAL)

    def close(self, final: dict | None = None, timeout: float = 2.0) -> None:
        """Flush everything, best effort within ``timeout``; used at interpreter exit."""
        self._stop.set()
        try:
            os.write(self._wake_write, b"x")
        except OSError:
            pass
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        if not self._thread.is_alive():
            for fd in (self._wake_read, self._wake_write):
                try:
                    os.close(fd)
                except OSError:
                    pass
        deadline = time.monotonic() + timeout
        self._wait_sent(deadline)  # what is pending first, so the last batch is not dropped as "behind"
        self.flush(final)
        self._wait_sent(deadline)
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _wait_sent(self, deadline: float) -> None:
        while self._pending and self._sock is not None and time.monotonic() < deadline:
            time.sleep(0.005)
            self._send_pending()


def rank_from_env() -> tuple[int, int, int]:
    env = os.environ
    return int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1))
