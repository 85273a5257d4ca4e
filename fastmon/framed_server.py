"""The one server under the monitor's two sockets: the ranks' channel (``fastmon.channel``)
and the job link between nodes (``fastmon.job_link``). A selector thread accepts, reads
length-prefixed frames (``fastmon.common.wire``) and writes each peer's outbox; what a
connection must send to be let in, and what its frames mean, is the protocol's.

What holds for both, so that a fix lands in both: a connection that has not been admitted
in time (``ADMIT_WITHIN`` seconds, the server's own where it says) is closed, at most ``PENDING_MAX`` wait at once (the oldest
goes), and until admitted it may send one small frame (``HELLO_MAX``). A failing
``accept()`` (no file descriptors left) frees the oldest waiting one and pauses accepting a
moment: never a spin, never the listener's end. Nothing is written on the caller's thread:
``send`` queues, a peer that stops reading loses what passes ``OUTBOX_MAX``, and no
caller ever waits for a peer (a stopped rank cannot freeze the monitor).
"""

from __future__ import annotations

import collections
import errno
import selectors
import socket
import threading
import time

from fastmon.common import wire

HELLO_MAX = 4096  # bytes a connection may send before it has been admitted
ADMIT_WITHIN = 1.5  # seconds a connection has to be admitted, by default (a real node needs milliseconds)
PENDING_MAX = 64  # connections waiting to be admitted at once: the oldest goes first
OUTBOX_MAX = 8 << 20  # bytes queued for one peer; a frame past it is not sent to that peer
ACCEPT_PAUSE = 0.2  # seconds without accepting after accept() failed for want of descriptors
TICK = 0.1  # the selector's wait: how late a deadline may be seen
FLUSH_AT_CLOSE = 1.0  # seconds ``close`` gives the outboxes to empty


class Peer:
    """One connection: what it sent (``reader``), what waits to go to it, and who it is
    once admitted (``name``: a rank, a node; whatever the protocol says)."""

    def __init__(self, conn: socket.socket, address) -> None:
        self.conn = conn
        self.address = address
        self.reader = wire.FrameReader(HELLO_MAX)
        self.opened = self.heard = time.monotonic()
        self.name = None
        self.admitted = False
        self.closing = False  # close once the outbox is empty
        self.outbox = bytearray()
        self.state: dict = {}  # the protocol's own


class Protocol:
    """What a server's connections say. Each method runs on the server's thread."""

    def opened(self, server: FramedServer, peer: Peer) -> None:
        """A connection accepted: a challenge may be queued here."""

    def admit(self, server: FramedServer, peer: Peer, hello: dict) -> object:
        """The name ``hello`` earns (admitted), or None (refused: closed and counted)."""
        raise NotImplementedError

    def heard(self, server: FramedServer, peer: Peer, message: dict) -> bool:
        """A message from an admitted peer; False closes it as refused."""
        raise NotImplementedError

    def dropped(self, server: FramedServer, peer: Peer, refused: bool) -> None:
        """A connection closed (``refused``: it was let in never or broke the protocol)."""

    def tick(self, server: FramedServer, now: float) -> None:
        """Every ``TICK`` at most: the protocol's own deadlines."""


class FramedServer:
    def __init__(self, listener: socket.socket, protocol: Protocol, name: str,
                 admit_within: float = ADMIT_WITHIN) -> None:
        listener.setblocking(False)
        self._admit_within = admit_within
        self.listener = listener
        self._protocol = protocol
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ)
        self._waker, self._wake_end = socket.socketpair()
        self._waker.setblocking(False)
        self._wake_end.setblocking(False)
        self._selector.register(self._wake_end, selectors.EVENT_READ)
        self._peers: dict[socket.socket, Peer] = {}
        self._pending: collections.OrderedDict[socket.socket, Peer] = collections.OrderedDict()
        self._lock = threading.Lock()  # the outboxes, and which peers are admitted
        self._stop = threading.Event()
        self._paused_until = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.connections = 0
        self.refused = 0  # closed before or for breaking the protocol
        self.accept_failures = 0
        self.unsent = 0  # frames a peer that stopped reading did not get

    def start(self) -> None:
        self._thread.start()

    # --- any thread ----------------------------------------------------------------------
    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._peers)

    def admitted(self) -> list[Peer]:
        with self._lock:
            return [peer for peer in self._peers.values() if peer.admitted and not peer.closing]

    def send(self, peers, message: dict) -> int:
        """Queue ``message`` for each peer; how many it was queued for. Never waits."""
        frame = wire.encode(message)
        queued = 0
        with self._lock:
            for peer in peers:
                if peer.conn in self._peers and not peer.closing:
                    if len(peer.outbox) + len(frame) > OUTBOX_MAX:
                        self.unsent += 1
                        continue
                    peer.outbox += frame
                    queued += 1
        if queued:
            self._wake()
        return queued

    def close(self) -> None:
        """Give the outboxes a moment to leave, then end the thread and close every socket."""
        deadline = time.monotonic() + FLUSH_AT_CLOSE
        while self._thread.is_alive() and time.monotonic() < deadline:
            with self._lock:
                if not any(peer.outbox for peer in self._peers.values()):
                    break
            time.sleep(0.02)
        self._stop.set()
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        for key in list(self._selector.get_map().values()):
            try:
                key.fileobj.close()
            except OSError:
                pass
        self._selector.close()
        self._waker.close()

    def _wake(self) -> None:
        try:
            self._waker.send(b"\0")
        except OSError:
            pass  # its buffer is full: the thread is awake already

    # --- the server's thread -------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            if self._paused_until and now >= self._paused_until:
                self._paused_until = 0.0
                self._selector.register(self.listener, selectors.EVENT_READ)
            for key, events in self._selector.select(timeout=TICK):
                try:
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj is self._wake_end:
                        self._drain_wakes()
                    else:
                        peer = self._peers.get(key.fileobj)
                        if peer is not None and events & selectors.EVENT_READ:
                            self._read(peer)
                except Exception:  # never the end of the server: that connection goes
                    peer = self._peers.get(key.fileobj)
                    if peer is not None:
                        self.drop(peer, refused=True)
            self._write_all()
            self._expire(time.monotonic())

    def _drain_wakes(self) -> None:
        try:
            while self._wake_end.recv(4096):
                pass
        except OSError:
            pass

    def _accept(self) -> None:
        for _ in range(PENDING_MAX):
            try:
                conn, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno == errno.ECONNABORTED:
                    continue
                # out of descriptors (EMFILE, ENFILE, ENOBUFS): free one, and wait a moment
                self.accept_failures += 1
                if self._pending:
                    self.drop(next(iter(self._pending.values())), refused=True)
                self._selector.unregister(self.listener)
                self._paused_until = time.monotonic() + ACCEPT_PAUSE
                return
            conn.setblocking(False)
            peer = Peer(conn, address)
            self.connections += 1
            with self._lock:
                self._peers[conn] = peer
            self._pending[conn] = peer
            self._selector.register(conn, selectors.EVENT_READ)
            if len(self._pending) > PENDING_MAX:
                self.drop(next(iter(self._pending.values())), refused=True)
            self._protocol.opened(self, peer)

    def _read(self, peer: Peer) -> None:
        try:
            data = peer.conn.recv(1 << 20 if peer.admitted else HELLO_MAX)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if peer.closing and data:
            return  # it has had its last word; what it says now is not read
        if not data:
            self.drop(peer, refused=not peer.admitted)
            return
        try:
            messages = peer.reader.feed(data)
        except (ValueError, UnicodeDecodeError):
            self.drop(peer, refused=True)
            return
        peer.heard = time.monotonic()
        while messages:
            message = messages.pop(0)
            if not isinstance(message, dict):
                self.drop(peer, refused=True)
                return
            if not peer.admitted:
                name = self._protocol.admit(self, peer, message)
                if peer.closing:
                    return  # the protocol answered and closes it (a place already taken)
                if name is None:
                    self.drop(peer, refused=True)
                    return
                self._pending.pop(peer.conn, None)
                peer.reader.max_frame = wire.MAX_FRAME
                with self._lock:  # after whatever admit queued (a welcome): broadcasts come next
                    peer.name, peer.admitted = name, True
                messages += peer.reader.feed(b"")  # what came with the hello
            elif not self._protocol.heard(self, peer, message):
                self.drop(peer, refused=True)
                return

    def _write_all(self) -> None:
        with self._lock:
            waiting = [peer for peer in self._peers.values() if peer.outbox or peer.closing]
        for peer in waiting:
            with self._lock:
                data = bytes(peer.outbox[:1 << 20])
            try:
                sent = peer.conn.send(data) if data else 0
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self.drop(peer, refused=False)
                continue
            with self._lock:
                del peer.outbox[:sent]
                done = not peer.outbox
            if peer.closing and done:
                self.drop(peer, refused=False)

    def _expire(self, now: float) -> None:
        while self._pending:
            peer = next(iter(self._pending.values()))
            if now - peer.opened < self._admit_within:
                break
            self.drop(peer, refused=not peer.closing)
        self._protocol.tick(self, now)

    def drop(self, peer: Peer, refused: bool) -> None:
        """Close ``peer`` (server's thread only); ``refused`` counts it."""
        with self._lock:
            if self._peers.pop(peer.conn, None) is None:
                return
            peer.closing = True
        self._pending.pop(peer.conn, None)
        try:
            self._selector.unregister(peer.conn)
        except (KeyError, ValueError):
            pass
        peer.conn.close()
        self.refused += refused
        self._protocol.dropped(self, peer, refused)

    def close_after_send(self, peer: Peer, message: dict) -> None:
        """Queue a last message for ``peer`` and close it once it has left."""
        self.send([peer], message)
        with self._lock:
            peer.closing = True  # (still under the admission deadline, should it stop reading)
