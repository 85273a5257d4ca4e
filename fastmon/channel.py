"""The monitor's end of the channel: a Unix socket in a private (0700) directory.

A socket path rather than an inherited socketpair, because under torchrun the probes
are grandchildren and several of them (one per rank) connect. Each connection speaks
length-prefixed JSON frames (``fastmon.wire``); the first message says which rank it is.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import tempfile
import threading

from fastmon import wire


class ChannelServer:
    def __init__(self, on_message) -> None:
        self._on_message = on_message
        self._dir = tempfile.mkdtemp(prefix="fastmon-")
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
        self.connections = 0
        self.open_connections = 0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                if key.fileobj is self._server:
                    self._accept()
                else:
                    self._read(key)

    def _accept(self) -> None:
        try:
            conn, _ = self._server.accept()
        except BlockingIOError:
            return
        conn.setblocking(True)
        self.connections += 1
        self.open_connections += 1
        self._selector.register(conn, selectors.EVENT_READ, data=[wire.FrameReader(), None])

    def _read(self, key) -> None:
        conn, (reader, rank) = key.fileobj, key.data
        try:
            data = conn.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            self._selector.unregister(conn)
            conn.close()
            self.open_connections -= 1
            with self._lock:
                if rank is not None and self._ranks.get(rank) is conn:
                    del self._ranks[rank]
            return
        try:
            messages = reader.feed(data)
        except ValueError:
            messages = []
        for message in messages:
            if message.get("t") == "hello":
                key.data[1] = rank = int(message.get("rank", 0))
                with self._lock:
                    self._ranks[rank] = conn
            self._on_message(message)

    def ranks(self) -> list[int]:
        with self._lock:
            return sorted(self._ranks)

    def send(self, message: dict, rank: int | None = None) -> int:
        """Send to one rank, or to every rank; returns how many it reached."""
        frame = wire.encode(message)
        with self._lock:
            targets = [self._ranks[rank]] if rank is not None and rank in self._ranks else (
                list(self._ranks.values()) if rank is None else [])
        sent = 0
        for conn in targets:
            try:
                conn.sendall(frame)
                sent += 1
            except OSError:
                pass
        return sent

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        for key in list(self._selector.get_map().values()):
            try:
                key.fileobj.close()
            except OSError:
                pass
        self._selector.close()
        shutil.rmtree(self._dir, ignore_errors=True)
