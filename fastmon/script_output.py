"""The training script's stdout and stderr, on the monitor's side: each pipe pumped into
the run folder's ``output.log``, onto the screens, and (headless) through to fastmon's
own stdout and stderr, as python would have printed them.

Python's behaviour is the rule at both ends: when fastmon's stdout is a pipe whose reader
has gone (``fastmon run ... | head``), the script meets a broken pipe at its next write;
when a process the script started outlives it and still holds the pipes, fastmon exits
with the script and a relay passes the helper's later output on.
"""

from __future__ import annotations

import codecs
import collections
import ctypes
import errno
import os
import select
import subprocess
import sys
import threading
import time

from fastmon.common.handover import OUTPUT_LOG

OUTPUT_KEPT = 256 * 2**20  # bytes of the script's output recorded (all of it passes through)
EXIT_GRACE_S = 0.5  # after the script's exit, quiet pipes this long are held by a helper
EXIT_WAIT_MAX_S = 5.0  # ... and a helper that never stops writing holds fastmon no longer
POLL_S = 0.1  # how soon a pump sees the script's exit or the trainer's answer
SAY_WAIT_S = 0.5  # fastmon's own line waits this long at most for the script's chunk being written
RECORD_WAIT_S = 0.05  # a chunk waits this long at most for output.log's writer before it passes on
RECORD_BACKLOG = 64 * 2**20  # bytes held for a stalled output.log; past them a chunk is only passed on
# Copies its stdin to its stdout until the writers are gone: python's own, as a helper
# would have written to the terminal directly.
RELAY = ("import os\n"
         "while data := os.read(0, 65536):\n"
         "    while data:\n"
         "        data = data[os.write(1, data):]\n")


def _libc_tee():
    """Linux's tee(2), which copies a pipe's bytes without taking them; None elsewhere."""
    try:
        tee = ctypes.CDLL(None, use_errno=True).tee
    except (OSError, AttributeError):
        return None
    tee.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint)
    tee.restype = ctypes.c_ssize_t
    return tee


TEE = _libc_tee()
SPLICE_F_NONBLOCK = 2


class PendingChunk:
    """A chunk copied out of the script's pipe and still in it: taken (read and dropped)
    once, by whichever comes first, the log's writer right after writing it or the pump
    when it stops waiting. Until then a monitor killed mid-chunk leaves it in the pipe for
    the trainer, which drains the pipe into output.log once the monitor is gone."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            left, self.size = self.size, 0
            while left > 0:
                try:
                    got = len(os.read(self.fd, left))
                except OSError:
                    return
                if not got:
                    return
                left -= got


class ScriptOutput:
    """``on_text(stream, text)``: what was recorded, decoded, for the screens.
    ``ask_to_close(stream)``: asks the trainer to let go of its copy of a pipe's read end
    (``fastmon.probe.output``): True if asked (it answers with ``closed_by_trainer``),
    False if it cannot be asked yet (not connected), None if no one else holds it."""

    def __init__(self, run_dir, on_text, ask_to_close, passthrough: bool, on_error=None) -> None:
        self.passthrough = passthrough
        self.on_text = on_text
        self.ask_to_close = ask_to_close
        self.on_error = on_error or (lambda message: None)  # said once: output.log cannot be written
        self.path = run_dir / OUTPUT_LOG
        self._log = LogWriter(self.path, self._unwritable)
        # Whether what the script last printed to the terminal ended its line: a progress
        # bar (tqdm) does not, and a status line written after it must start a new one.
        self.line_ended = True
        # held while the terminal is written and ``line_ended`` follows: a status line read
        # the flag, then landed after a bar written in between, glued to it
        self.terminal = threading.Lock()
        self._pumps: dict[str, threading.Thread] = {}
        self._unread_by_anyone: set[str] = set()  # fastmon's own stream has no reader: stop passing
        self._asked: set[str] = set()  # ... the trainer was asked to close its copy
        self._let_go: set[str] = set()  # ... and it has: close ours
        self._hand_over = threading.Event()
        self._last_data = 0.0  # monotonic time of the last chunk
        self._copies: dict[int, tuple[int, int]] = {}  # script's read end -> a pipe tee(2) copies into

    def start(self, fds: dict[str, int]) -> None:
        """Pump each stream's read end, named "stdout" or "stderr"."""
        for name, fd in fds.items():
            if TEE is not None:
                self._copies[fd] = os.pipe()
            thread = threading.Thread(target=self._pump, args=(name, fd), daemon=True, name=f"fastmon-{name}")
            thread.start()
            self._pumps[name] = thread

    def say(self, lines: list[str]) -> None:
        """fastmon's own lines on stderr, each whole, between the script's chunks. A
        terminal the script's output blocks (a stalled reader) does not hold them longer
        than SAY_WAIT_S: written then, at worst beside a bar."""
        locked = self.terminal.acquire(timeout=SAY_WAIT_S)
        try:
            sys.stderr.write(("" if self.line_ended else "\n") + "".join(line + "\n" for line in lines))
            sys.stderr.flush()
            self.line_ended = True
        finally:
            if locked:
                self.terminal.release()

    def closed_by_trainer(self, stream: str) -> None:
        self._let_go.add(stream)

    def wait_after_exit(self) -> None:
        """The script has exited: take what it printed last. A pipe still open past the
        grace is held by a process it started; a relay takes it over, and fastmon is free."""
        started = time.monotonic()
        while any(thread.is_alive() for thread in self._pumps.values()):
            now = time.monotonic()
            if now - max(started, self._last_data) > EXIT_GRACE_S or now - started > EXIT_WAIT_MAX_S:
                break
            time.sleep(0.02)
        self._hand_over.set()
        for thread in self._pumps.values():
            thread.join(timeout=EXIT_GRACE_S)

    @property
    def kept(self) -> int:
        return self._log.written

    @property
    def write_error(self) -> str | None:
        return self._log.error

    def close(self) -> dict:
        """Close output.log; what it holds and what went past its bound, for the record."""
        self._log.close()
        out = {"kept_bytes": self._log.written, "dropped_bytes": self._log.dropped}
        if self._log.error:
            out["write_error"] = self._log.error
        return out

    def _pump(self, stream: str, fd: int) -> None:
        out = getattr(sys, stream)
        # A character split across two reads is one character, not two U+FFFD
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            if stream in self._let_go:
                break
            if self._hand_over.is_set():
                self._relay(stream, fd, out)
                break
            if stream in self._unread_by_anyone and stream not in self._asked:
                self._ask(stream)  # again at each poll until the trainer can be asked
            taken = self._take(fd, POLL_S)
            if taken is None:
                break
            data, kept = taken
            if not data:
                continue
            self._last_data = time.monotonic()
            if self.passthrough and stream not in self._unread_by_anyone:
                try:
                    with self.terminal:
                        out.buffer.write(data)
                        out.flush()
                        self.line_ended = data.endswith(b"\n")
                except BrokenPipeError:
                    self._reader_gone(stream, out)
                except (OSError, ValueError, AttributeError):
                    pass
            if kept:
                try:
                    self.on_text(stream, decoder.decode(data))
                except Exception:  # the screens' copy: never a reason to stop passing output
                    pass
        os.close(fd)
        for copy_fd in self._copies.pop(fd, ()):
            os.close(copy_fd)

    def _take(self, fd: int, timeout: float) -> tuple[bytes, bool] | None:
        """The next chunk of a stream and whether it is recorded (b"" if none came within
        ``timeout``); None at its end. Up to OUTPUT_KEPT bytes are recorded: handed to the
        log's writer, waited for up to RECORD_WAIT_S. The chunk is copied out of the pipe
        (tee) and left in it until written (``PendingChunk``): a killed monitor loses none
        of it. Not spliced into the log by the kernel: a splice into a file on a frozen
        disk holds the pipe's lock, and then the script's own writes wait for the disk. A
        stalled disk costs the script RECORD_WAIT_S once, then none while the backlog
        (RECORD_BACKLOG) lasts; only then may a killed monitor lose the chunks queued."""
        if not select.select([fd], [], [], timeout)[0]:
            return b"", False
        if fd not in self._copies:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return None
            return (data, self._log.write(data)) if data else None
        copy_read, copy_write = self._copies[fd]
        size = TEE(fd, copy_write, 65536, SPLICE_F_NONBLOCK)
        if size < 0:
            return (b"", False) if ctypes.get_errno() in (errno.EAGAIN, errno.EINTR) else None
        if size == 0:
            return None
        data = b""
        while len(data) < size:
            data += os.read(copy_read, size - len(data))
        pending = PendingChunk(fd, size)
        try:
            return data, self._log.write(data, pending.take)
        finally:
            pending.take()

    def _unwritable(self, error: str, written: int) -> None:
        """output.log cannot take more (a full disk, a folder gone): the output goes on to
        the terminal and the screens; the record says from where it lacks it."""
        try:
            self.on_error(f"cannot write {self.path} ({error}): the script's output is recorded up to "
                          f"byte {written:,} only; it still shows here")
        except Exception:
            pass

    def _reader_gone(self, stream: str, out) -> None:
        """fastmon's own stream has no reader (``| head`` has exited): the script's next
        write must fail as it would have without fastmon. Once no one else holds the
        pipe's read end, closing ours does that."""
        self._unread_by_anyone.add(stream)
        try:  # python's advice for a broken stdout: nothing more is written to it, not even at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, out.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        self._ask(stream)

    def _ask(self, stream: str) -> None:
        asked = self.ask_to_close(stream)
        if asked is None:
            self._let_go.add(stream)
        elif asked:
            self._asked.add(stream)

    def _relay(self, stream: str, fd: int, out) -> None:
        """Headless, to fastmon's own stream, as python would have printed it; under the
        dashboard (which may still be on screen), to the end of output.log."""
        try:
            if not self.passthrough:
                target = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            elif stream in self._unread_by_anyone:
                target = os.open(os.devnull, os.O_WRONLY)
            else:
                target = os.dup(out.fileno())
        except (OSError, ValueError, AttributeError):
            return
        try:
            subprocess.Popen([sys.executable, "-S", "-c", RELAY], stdin=fd, stdout=target,
                             stderr=subprocess.DEVNULL)
        except OSError:
            pass
        finally:
            os.close(target)


class LogWriter:
    """output.log, written by a thread of its own: a disk that stalls holds up this thread,
    never the pumps that read the script's pipes. ``write`` returns whether the chunk is
    recorded (False past OUTPUT_KEPT, past RECORD_BACKLOG, or once the log cannot be
    written: ``on_error(why, bytes written)``, once)."""

    def __init__(self, path, on_error) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._on_error = on_error
        self._queue: collections.deque = collections.deque()
        self._lock = threading.Condition()
        self._accepted = 0  # bytes taken to be recorded, written or queued
        self._backlog = 0
        self._closing = False
        self.written = self.dropped = 0
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="fastmon-output-log", daemon=True)
        self._thread.start()

    def write(self, data: bytes, written=None) -> bool:
        """``written()`` is called right after the chunk reaches the file, if it does."""
        done = threading.Event()
        with self._lock:
            if (self.error or self._closing or self._accepted + len(data) > OUTPUT_KEPT
                    or self._backlog + len(data) > RECORD_BACKLOG):
                self.dropped += len(data) if not self._closing else 0  # (after the run's end: passed on only)
                return False
            behind = self._backlog > 0  # stalled already: the script is not made to wait again
            self._accepted += len(data)
            self._backlog += len(data)
            self._queue.append((data, done, written))
            self._lock.notify()
        if not behind:
            done.wait(RECORD_WAIT_S)
        return True

    def close(self, wait: float = 1.0) -> None:
        """Write what is queued (for ``wait`` s at most: a frozen disk is not waited for),
        then close."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        self._thread.join(wait)
        with self._lock:
            self.dropped += sum(len(data) for data, _, _ in self._queue)
            self._queue.clear()
        if not self._thread.is_alive():
            os.close(self._fd)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._lock.wait()
                if not self._queue:
                    return
                data, done, written = self._queue[0]
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
            except OSError as exc:
                with self._lock:
                    self.error = f"{exc.strerror or exc}"
                    self.dropped += sum(len(d) for d, _, _ in self._queue)
                    for _, waiting, _ in self._queue:
                        waiting.set()
                    self._queue.clear()
                    self._backlog = 0
                self._on_error(self.error, self.written)
                continue
            if written is not None:
                written()
            with self._lock:
                self._queue.popleft()
                self._backlog -= len(data)
                self.written += len(data)
            done.set()
