"""Keep the script's output, and the script, alive when the monitor goes away.

The child's stdout and stderr are pipes that the monitor reads. The child also holds the
read ends (``FASTMON_OUTPUT_FDS``, never read while the monitor lives), so a write never
meets a pipe without a reader: no ``BrokenPipeError`` for ``print``,
``sys.stdout.buffer.write`` or ``os.write(1, ...)``, no SIGPIPE for a child process that
inherited the descriptors. When the monitor is gone (the channel closes), threads here
drain the pipes, what was in flight first, into the run folder's ``output.log``. The
monitor took a chunk out of a pipe only once it had written it there (``tee``): the log
ends as the script's output, whole.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import threading
import time

from fastmon.common.handover import OUTPUT_FDS_ENV, OUTPUT_LOG


class OutputKeeper:
    def __init__(self, read_fds: dict[str, int], run_dir: str | None) -> None:
        self.read_fds = read_fds  # "stdout" / "stderr" -> the read end held here
        self.path = os.path.join(run_dir, OUTPUT_LOG) if run_dir else os.devnull
        self.orphaned = False
        self._lock = threading.Lock()

    def monitor_gone(self) -> None:
        """From the publisher's thread, when the channel closes: drain from now on."""
        with self._lock:
            if self.orphaned or not self.read_fds:
                return
            self.orphaned = True
        for fd in self.read_fds.values():
            threading.Thread(target=self._drain, args=(fd,), name="fastmon-output", daemon=True).start()

    def _drain(self, fd: int) -> None:
        try:
            log = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError:
            log = os.open(os.devnull, os.O_WRONLY)
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            if not data:
                return
            try:
                os.write(log, data)
            except OSError:
                pass

    def let_go(self, stream) -> bool:
        """fastmon's own stream lost its reader (``| head``): close the copy held here, so
        that the script's next write meets the broken pipe it would have met without
        fastmon. Not once the monitor is gone: this process drains the pipe then."""
        with self._lock:
            if self.orphaned or stream not in self.read_fds:
                return False
            os.close(self.read_fds.pop(stream))
            return True

    def close(self, wait: float = 1.0) -> None:
        """At the script's end, with no monitor: let the drains empty the pipes (they keep
        the order), for up to ``wait`` seconds."""
        if not self.orphaned:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(unread(fd) for fd in self.read_fds.values()):
            time.sleep(0.01)


def unread(fd: int) -> int:
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def keep_output(run_dir: str | None) -> OutputKeeper:
    """The keeper of the read ends the monitor passed down, if any (torchrun's ranks have none)."""
    fds = {}
    for stream, text in zip(("stdout", "stderr"), os.environ.pop(OUTPUT_FDS_ENV, "").split(",")):
        try:
            fd = int(text)
            os.fstat(fd)
        except (ValueError, OSError):
            continue
        os.set_inheritable(fd, False)
        fds[stream] = fd
    return OutputKeeper(fds, run_dir)
