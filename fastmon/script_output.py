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
NO_SPLICE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)  # a file system without splice: read and write
# Copies its stdin to its stdout until the writers are gone: python's own, as a helper
# would have written to the terminal directly.
RELAY = ("import os\n"
         "while data := os.read(0, 65536):\n"
         "    while data:\n"
         "        data = data[os.write(1, data):]\n")


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
        self.kept = self.dropped = 0  # bytes recorded, and bytes past the bound or unwritable
        self.write_error: str | None = None  # why output.log stopped taking the output (a full disk)
        # Not O_APPEND: splice(2) refuses such a file; the pumps keep the offset (_take).
        self.path = run_dir / OUTPUT_LOG
        self.log = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self.lock = threading.Lock()  # the two pumps share output.log's offset
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

    def start(self, fds: dict[str, int]) -> None:
        """Pump each stream's read end, named "stdout" or "stderr"."""
        for name, fd in fds.items():
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

    def close(self) -> dict:
        """Close output.log; what it holds and what went past its bound, for the record."""
        with self.lock:
            if self.log >= 0:
                os.close(self.log)
                self.log = -1
        out = {"kept_bytes": self.kept, "dropped_bytes": self.dropped}
        if self.write_error:
            out["write_error"] = self.write_error
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

    def _take(self, fd: int, timeout: float) -> tuple[bytes, bool] | None:
        """The next chunk of a stream and whether it is recorded (b"" if none came within
        ``timeout``); None at its end. Up to OUTPUT_KEPT bytes are recorded, each moved
        from the pipe into output.log by the kernel (splice) before it is read back: there
        is no moment when a killed monitor holds output that is neither in the pipe (which
        the trainer then drains) nor in the log. Past that bound a chunk is read, counted
        and only passed through."""
        if not select.select([fd], [], [], timeout)[0]:  # no lock held while the stream is quiet
            return b"", False
        with self.lock:
            if self.kept < OUTPUT_KEPT and self.log >= 0 and self.write_error is None:
                try:
                    moved = os.splice(fd, self.log, 65536, offset_dst=self.kept, flags=os.SPLICE_F_NONBLOCK)
                except BlockingIOError:
                    return b"", False
                except OSError as exc:
                    if exc.errno not in NO_SPLICE:  # the log cannot be written: nothing left the pipe
                        self._unwritable(exc)
                    moved = None
                except AttributeError:  # no splice (not Linux): read, then append
                    moved = None
                if moved == 0:
                    return None
                if moved is not None:
                    data = os.pread(self.log, moved, self.kept)
                    self.kept += moved
                    return data, True
        try:
            data = os.read(fd, 65536)
        except OSError:
            return None
        if not data:
            return None
        with self.lock:
            keep = self.kept + len(data) <= OUTPUT_KEPT and self.log >= 0 and self.write_error is None
            if keep:
                try:
                    os.pwrite(self.log, data, self.kept)
                    self.kept += len(data)
                except OSError as exc:
                    self._unwritable(exc)
                    keep = False
            if not keep and self.log >= 0:  # (after the run's end, output is only passed through)
                self.dropped += len(data)
        return data, keep

    def _unwritable(self, exc: OSError) -> None:
        """output.log cannot take more (a full disk, a folder gone): the output goes on to
        the terminal and the screens; the record says from where it lacks it."""
        self.write_error = f"{exc.strerror or exc}"
        try:
            self.on_error(f"cannot write {self.path} ({self.write_error}): the script's output is recorded up to "
                          f"byte {self.kept:,} only; it still shows here")
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
