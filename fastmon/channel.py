"""The monitor's end of the channel: a Unix socket in a private (0700) directory.

A socket path rather than an inherited socketpair, because under torchrun the probes
are grandchildren and several of them (one per rank) connect. Each connection speaks
length-prefixed JSON frames (``fastmon.common.wire``); the first message says which rank it is
and carries the run's secret, which the probes inherit in their environment
(``FASTMON_SECRET``, never on a command line). A connection without it, with a frame that
cannot be read, or claiming a rank already connected is closed and counted (``refused``);
nothing another process sends can end the reader or take a rank's place, and until a
connection has shown the secret it may send one small frame (``HELLO_MAX``), no more.

A socket's path may hold 107 bytes: where TMPDIR's is too long for it, the folder goes in
/tmp (or /dev/shm), still private to this user.
"""

from __future__ import annotations

import hmac
import os
import secrets
import selectors
import shutil
import socket
import tempfile
import threading

from fastmon.common import wire

HELLO_MAX = 4096  # bytes a connection may send before it has shown the secret
SOCKET_PATH_MAX = 100  # of the 107 a Unix socket's path may hold (sun_path), with room to spare
SHORT_FOLDERS = ("/tmp", "/dev/shm")  # where the folder goes when TMPDIR's path is too long


def private_folder() -> str:
    """A new 0700 folder whose socket path fits: in TMPDIR, else in a short system one."""
    for parent in (None, *SHORT_FOLDERS):
        try:
            folder = tempfile.mkdtemp(prefix="fastmon-", dir=parent)
        except OSError:
            continue
        if len(os.path.join(folder, "channel.sock")) <= SOCKET_PATH_MAX:
            return folder
        os.rmdir(folder)
    raise OSError("no folder for the monitor's socket: TMPDIR's path is too long and /tmp and /dev/shm "
                  "cannot be written")


class ChannelServer:
    def __init__(self, on_message) -> None:
        self._on_message = on_message
        self._dir = private_folder()
        os.chmod(self._dir, 0o700)
        self.path = os.path.join(self._dir, "channel.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(64)
        self._server.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ)
        self._ranks: dict[int, socket.socket] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastmon-channel", daemon=True)
        self.secret = secrets.token_hex(16)
        self.connections = 0
        self.open_connections = 0
        self.refused = 0  # connections closed for a missing secret, an unreadable frame or a rank taken
        self.failed_messages = 0  # messages from a probe that the monitor could not take

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                try:
                    if key.fileobj is self._server:
                        self._accept()
                    else:
                        self._read(key)
                except Exception:  # never the end of the reader: that connection goes
                    self._drop(key.fileobj, key.data[1] if key.data else None, refused=True)

    def _accept(self) -> None:
        try:
            conn, _ = self._server.accept()
        except BlockingIOError:
            return
        conn.setblocking(True)
        self.connections += 1
        self.open_connections += 1
        self._selector.register(conn, selectors.EVENT_READ, data=[wire.FrameReader(HELLO_MAX), None])

    def _read(self, key) -> None:
        conn, (reader, rank) = key.fileobj, key.data
        try:
            data = conn.recv(1 << 20 if rank is not None else HELLO_MAX)
        except OSError:
            data = b""
        if not data:
            self._drop(conn, rank)
            return
        try:
            messages = reader.feed(data)
        except (ValueError, UnicodeDecodeError):
            self._drop(conn, rank, refused=True)
            return
        for message in messages:
            if rank is None:
                rank = self._admit(conn, message)
                if rank is None:
                    self._drop(conn, None, refused=True)
                    return
                key.data[1] = rank
                reader.max_frame = wire.MAX_FRAME  # shown the secret: a probe's frames from here
                messages += reader.feed(b"")  # what came with the hello
                message = {k: v for k, v in message.items() if k != "secret"}
            elif message.get("t") == "hello" or message.get("rank", rank) != rank:
                self._drop(conn, rank, refused=True)  # a probe says hello once, for its own rank
                return
            message.setdefault("rank", rank)  # (its last word, "bye", says how many steps, not whose)
            try:
                self._on_message(message)
            except Exception:
                self.failed_messages += 1

    def _admit(self, conn, hello: dict) -> int | None:
        """The rank a connection's first message claims, if it is a hello with the run's
        secret for a rank not connected yet; else None."""
        secret, rank = hello.get("secret"), hello.get("rank")
        if hello.get("t") != "hello" or not isinstance(secret, str) or not hmac.compare_digest(secret, self.secret):
            return None
        if type(rank) is not int or rank < 0:
            return None
        with self._lock:
            if rank in self._ranks:
                return None
            self._ranks[rank] = conn
        return rank

    def _drop(self, conn, rank: int | None, refused: bool = False) -> None:
        try:
            self._selector.unregister(conn)
        except (KeyError, ValueError):
            return
        conn.close()
        self.open_connections -= 1
        self.refused += refused
        with self._lock:
            if rank is not None and self._ranks.get(rank) is conn:
                del self._ranks[rank]

    def ranks(self) -> list[int]:
        with self._lock:
            return sorted(self._ranks)

    def send(self, message: dict, rank: int | None = None) -> int:
        """Send to one rank, or to every rank; returns how many it reached."""
        frame = wire.encode(message)
        with self._lock:
            targets = [self._ranks[rank]] if rank is not None and rank in self._ranks else (
                list(self._ranks.values()) if rank is None else [])
        return send_to_each(targets, frame)

    def close(self) -> None:
        stop_selecting(self._stop, self._thread, self._selector)
        shutil.rmtree(self._dir, ignore_errors=True)


def send_to_each(connections, frame: bytes) -> int:
    """``frame`` to each connection; how many it reached (one that fails is passed over)."""
    sent = 0
    for conn in connections:
        try:
            conn.sendall(frame)
            sent += 1
        except OSError:
            pass
    return sent


def stop_selecting(stop: threading.Event, thread: threading.Thread, selector) -> None:
    """End a server's selector thread and close every socket it watched."""
    stop.set()
    if thread.is_alive():
        thread.join(timeout=2)
    for key in list(selector.get_map().values()):
        try:
            key.fileobj.close()
        except OSError:
            pass
    selector.close()
