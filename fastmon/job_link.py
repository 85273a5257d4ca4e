"""The link between the monitors of a multi-node job: node 0's monitor listens on TCP
(``JobServer``), every other node's monitor streams its ranks' step rows to it
(``NodeClient``) and passes node 0's live changes on to its ranks.

Only monitors that hold the job's secret (``FASTMON_JOB_SECRET``, or the 0600 file
``FASTMON_JOB_SECRET_FILE`` names) talk: node 0 sends a random challenge, a node answers
with an HMAC of it under the secret, node 0 proves itself the same way; the secret itself
never crosses the network. Until a connection has proved it, it may send one small frame
(``HELLO_MAX``). Each node keeps its own complete record whatever the link does.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import secrets
import selectors
import socket
import stat
import threading
import time

from fastmon.channel import send_to_each, stop_selecting
from fastmon.common import wire

HELLO_MAX = 4096  # bytes a connection may send before it has proved the secret
MASTER_PORT = 29500  # torchrun's default
LOST_AFTER = 10.0  # seconds without a word from a node: it is lost
ALIVE_EVERY = 1.0  # a node says it is alive at least this often
RETRY_EVERY = 1.0  # seconds between a node's tries to reach node 0
PENDING_ROWS = 200_000  # step rows a node keeps for node 0 while it cannot reach it
END_WAIT = 3.0  # seconds a node's monitor waits at the end for its last rows to leave
ROWS_PER_FRAME = 2_000


def torchrun_value(torchrun: list[str] | None, name: str) -> str | None:
    """The value torchrun's option ``name`` (``--node-rank``) was given, as given."""
    options = torchrun or []
    for i, option in enumerate(options):
        given, equals, value = option.partition("=")
        if given.replace("_", "-") == name:
            return value if equals else (options[i + 1] if i + 1 < len(options) else None)
    return None


def node_rank(torchrun: list[str] | None) -> str:
    """The node this monitor watches, from torchrun's --node-rank ("0" when not given)."""
    return torchrun_value(torchrun, "--node-rank") or "0"


def job_nodes(torchrun: list[str] | None) -> int:
    """How many nodes the job has at most (torchrun's --nnodes, "2" or "1:4")."""
    given = torchrun_value(torchrun, "--nnodes") or "1"
    try:
        return int(given.rpartition(":")[2])
    except ValueError:
        return 1


def node0_address(torchrun: list[str] | None, job_port: int | None) -> tuple[str, int]:
    """Where node 0's monitor listens: the master's (or the rendezvous endpoint's) host,
    at ``job_port`` or the master port + 1."""
    host = torchrun_value(torchrun, "--master-addr")
    port = torchrun_value(torchrun, "--master-port")
    endpoint = torchrun_value(torchrun, "--rdzv-endpoint")
    if host is None and endpoint:
        host, _, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", None)
    try:
        master_port = int(port) if port else MASTER_PORT
    except ValueError:
        master_port = MASTER_PORT
    return host or "127.0.0.1", job_port if job_port is not None else master_port + 1


class NoSecret(Exception):
    """The job's secret is missing or not private; says why."""


def job_secret(env=os.environ) -> str:
    """The job's secret, from ``FASTMON_JOB_SECRET`` or the file ``FASTMON_JOB_SECRET_FILE``
    names (which only its owner may read); raises NoSecret saying why not."""
    if env.get("FASTMON_JOB_SECRET"):
        return env["FASTMON_JOB_SECRET"]
    path = env.get("FASTMON_JOB_SECRET_FILE")
    if not path:
        raise NoSecret("no job secret (FASTMON_JOB_SECRET or FASTMON_JOB_SECRET_FILE)")
    try:
        with open(path, "rb") as file:
            info = os.fstat(file.fileno())
            if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
                raise NoSecret(f"the job secret file {path} may be read by others (chmod 600 it)")
            text = file.read(4096).decode(errors="replace").strip()
    except OSError as exc:
        raise NoSecret(f"the job secret file {path} cannot be read ({exc.strerror or exc})") from None
    if not text:
        raise NoSecret(f"the job secret file {path} is empty")
    return text


def proof(secret: str, who: str, nonce: str) -> str:
    return hmac.new(secret.encode(), f"{who}|{nonce}".encode(), hashlib.sha256).hexdigest()


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(wire.encode(message))


class _Peer:
    def __init__(self, conn: socket.socket, address) -> None:
        self.conn = conn
        self.address = address
        self.reader = wire.FrameReader(HELLO_MAX)
        self.nonce = secrets.token_hex(16)
        self.node: int | None = None
        self.heard = time.monotonic()
        self.ended = False


class JobServer:
    """Node 0's end: proves and admits the other nodes' monitors, hands their messages to
    ``on_message(node, message)``, says a node lost with ``on_lost(node, when)``."""

    def __init__(self, secret: str, port: int, on_message, on_lost, on_refused) -> None:
        self._secret = secret
        self._on_message, self._on_lost, self._on_refused = on_message, on_lost, on_refused
        self._server = socket.create_server(("", port), backlog=16)
        self._server.setblocking(False)
        self.port = self._server.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ)
        self._nodes: dict[int, _Peer] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastmon-job-server", daemon=True)
        self.refused = 0  # connections that did not prove the secret, or sent what no node sends

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.2):
                try:
                    if key.fileobj is self._server:
                        self._accept()
                    else:
                        self._read(key.data)
                except Exception:  # never the end of the server: that connection goes
                    self._drop(key.data, refused=True)
            now = time.monotonic()
            for peer in [p for p in self._peers() if p.node is not None and now - p.heard > LOST_AFTER]:
                self._drop(peer)

    def _peers(self) -> list[_Peer]:
        return [key.data for key in self._selector.get_map().values() if key.data is not None]

    def _accept(self) -> None:
        try:
            conn, address = self._server.accept()
        except BlockingIOError:
            return
        conn.settimeout(5.0)  # a node that stops reading is dropped, never waited for
        peer = _Peer(conn, address)
        self._selector.register(conn, selectors.EVENT_READ, data=peer)
        try:
            _send(conn, {"t": "challenge", "nonce": peer.nonce})
        except OSError:
            self._drop(peer, refused=True)

    def _read(self, peer: _Peer) -> None:
        try:
            data = peer.conn.recv(1 << 20 if peer.node is not None else HELLO_MAX)
        except OSError:
            data = b""
        if not data:
            self._drop(peer, refused=peer.node is None)
            return
        try:
            messages = peer.reader.feed(data)
        except (ValueError, UnicodeDecodeError):
            self._drop(peer, refused=True)
            return
        peer.heard = time.monotonic()
        for message in messages:
            if peer.node is None:
                answer = self._admit(peer, message)
                if answer != "welcome":
                    self._drop(peer, refused=answer == "refused")
                    return
                messages += peer.reader.feed(b"")
                continue
            if message.get("t") == "end":
                peer.ended = True
            if message.get("t") != "alive":  # (it has done its work: ``heard``)
                self._on_message(peer.node, message)

    def _admit(self, peer: _Peer, hello: dict) -> str:
        """welcome, refused (no proof of the secret), or taken (that node is linked)."""
        node, mac, nonce = hello.get("node"), hello.get("proof"), hello.get("nonce")
        if (hello.get("t") != "hello" or type(node) is not int or node < 1 or not isinstance(mac, str)
                or not isinstance(nonce, str) or not hmac.compare_digest(mac, proof(self._secret, f"node{node}",
                                                                                   peer.nonce))):
            return "refused"
        with self._lock:
            old = self._nodes.get(node)
            taken = old is not None and old.conn.fileno() != -1 and not old.ended
            if not taken:
                self._nodes[node] = peer
        if taken:  # proven, but its place holds: it may try again once the old link is seen gone
            _send(peer.conn, {"t": "taken"})
            return "taken"
        _send(peer.conn, {"t": "welcome", "proof": proof(self._secret, "node0", nonce)})
        peer.node = node
        peer.reader.max_frame = wire.MAX_FRAME
        self._on_message(node, {"t": "joined", "address": peer.address[0]})
        return "welcome"

    def _drop(self, peer: _Peer | None, refused: bool = False) -> None:
        if peer is None:
            return
        try:
            self._selector.unregister(peer.conn)
        except (KeyError, ValueError):
            return
        peer.conn.close()
        if refused and peer.node is None:
            self.refused += 1
            self._on_refused(peer.address[0])
        elif peer.node is not None and not peer.ended:
            self._on_lost(peer.node, time.time())

    def nodes(self) -> list[int]:
        with self._lock:
            return sorted(n for n, p in self._nodes.items() if p.conn.fileno() != -1 and not p.ended)

    def send(self, message: dict) -> int:
        """Send to every node connected; returns how many it reached."""
        frame = wire.encode(message)
        with self._lock:
            peers = [p for p in self._nodes.values() if p.conn.fileno() != -1 and not p.ended]
        return send_to_each([peer.conn for peer in peers], frame)

    def close(self) -> None:
        stop_selecting(self._stop, self._thread, self._selector)


class NodeClient:
    """A node's end (node ≥ 1): reaches node 0's monitor (retrying until it answers), proves
    the secret, streams what ``put`` is given, hands node 0's messages to ``on_message``."""

    def __init__(self, address: tuple[str, int], node: int, secret: str, on_message, say) -> None:
        self.address, self.node = address, node
        self._secret, self._on_message, self._say = secret, on_message, say
        self._pending: collections.deque = collections.deque()
        self._pending_rows = 0
        self.unsent_rows = 0  # rows left out while node 0 could not be reached for long
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._ending = False
        self.connected = False
        self.ever_connected = False
        self.rows_sent = 0
        self.refused = False  # node 0 did not take this node's proof: the secrets differ
        self._told: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="fastmon-node-link", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, message: dict) -> None:
        with self._lock:
            self._pending.append(message)
            self._pending_rows += len(message.get("rows") or ())
            while self._pending_rows > PENDING_ROWS and self._pending[0].get("rows"):
                left_out = self._pending.popleft()
                self._pending_rows -= len(left_out["rows"])
                self.unsent_rows += len(left_out["rows"])
        self._wake.set()

    def close(self, exit_code: int, wait: float = END_WAIT) -> bool:
        """The last message; waits up to ``wait`` s for all to leave. True if they did."""
        self.put({"t": "end", "exit_code": exit_code, "unsent_rows": self.unsent_rows})
        self._ending = True
        deadline = time.monotonic() + wait
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._thread.join(timeout=0.05)
        self._stop.set()
        return not self._thread.is_alive()

    def _tell_once(self, key: str, text: str) -> None:
        if key not in self._told:
            self._told.add(key)
            self._say(text)

    def _run(self) -> None:
        where = f"{self.address[0]}:{self.address[1]}"
        while not self._stop.is_set() and not self.refused:
            try:
                conn = self._connect()
            except OSError as exc:
                if self._ending:
                    return  # node 0 was never reached: this node's record has it all
                self._tell_once("unreached", f"node 0's monitor at {where} not reached yet ({exc.strerror or exc}); "
                                f"retrying every {RETRY_EVERY:g} s (node 0 needs the job's secret too, and it "
                                "listens at the master port + 1 unless --job-port, the same on every node, says "
                                "otherwise); this node's record is kept whatever happens")
                self._stop.wait(RETRY_EVERY)
                continue
            if conn is None:
                self.refused = True
                self._say(f"node 0's monitor at {where} refused this node's proof (the job secrets differ, or "
                          f"node {self.node} is connected already): this node's ranks are in its own record only")
                return
            self.connected = self.ever_connected = True
            self._tell_once("joined", f"streaming this node's ranks to node 0's monitor at {where}")
            try:
                if self._stream(conn):
                    return
            except OSError as exc:
                self._say(f"the link to node 0's monitor broke ({exc.strerror or exc}); reconnecting")
            finally:
                self.connected = False
                conn.close()
            self._stop.wait(RETRY_EVERY)

    def _connect(self) -> socket.socket | None:
        """A proven connection to node 0; None where node 0 refused the proof."""
        conn = socket.create_connection(self.address, timeout=5.0)
        try:
            reader = wire.FrameReader(HELLO_MAX)
            challenge = self._receive(conn, reader)
            nonce = secrets.token_hex(16)
            _send(conn, {"t": "hello", "node": self.node, "nonce": nonce,
                         "proof": proof(self._secret, f"node{self.node}", str(challenge.get("nonce")))})
            welcome = self._receive(conn, reader)
        except ConnectionError:
            conn.close()
            return None  # closed on the proof: the secrets differ
        except (OSError, ValueError):
            conn.close()
            raise OSError("node 0's monitor did not answer as one")
        if welcome.get("t") == "taken":
            conn.close()
            raise OSError(f"node {self.node}'s earlier link is still open there")
        if welcome.get("t") != "welcome" or not hmac.compare_digest(str(welcome.get("proof")),
                                                                     proof(self._secret, "node0", nonce)):
            conn.close()
            return None
        conn.settimeout(0.2)
        return conn

    @staticmethod
    def _receive(conn: socket.socket, reader: wire.FrameReader) -> dict:
        while True:
            messages = reader.feed(b"")
            if messages:
                return messages[0]
            data = conn.recv(HELLO_MAX)
            if not data:
                raise ConnectionResetError("closed")
            messages = reader.feed(data)
            if messages:
                return messages[0]

    def _stream(self, conn: socket.socket) -> bool:
        """Send until the end (True) or until the connection breaks (OSError)."""
        reader = wire.FrameReader()
        last_sent = 0.0
        while not self._stop.is_set():
            with self._lock:
                batch = list(self._pending)
            if batch:
                conn.settimeout(5.0)
                for message in batch:
                    for part in _split_rows(message):
                        conn.sendall(wire.encode(part))
                    with self._lock:
                        self._pending.popleft()
                        self._pending_rows -= len(message.get("rows") or ())
                    self.rows_sent += len(message.get("rows") or ())
                    last_sent = time.monotonic()
                    if message.get("t") == "end":
                        return True
                conn.settimeout(0.2)
            elif time.monotonic() - last_sent >= ALIVE_EVERY:
                conn.settimeout(5.0)
                _send(conn, {"t": "alive"})
                conn.settimeout(0.2)
                last_sent = time.monotonic()
            try:
                data = conn.recv(1 << 16)
            except socket.timeout:
                data = None
            if data == b"":
                raise ConnectionResetError("node 0's monitor closed the link")
            for message in reader.feed(data) if data else ():
                self._on_message(message)
            self._wake.wait(0.0 if self._pending else 0.2)
            self._wake.clear()
        return True


def _split_rows(message: dict):
    rows = message.get("rows")
    if not rows or len(rows) <= ROWS_PER_FRAME:
        yield message
        return
    for i in range(0, len(rows), ROWS_PER_FRAME):
        yield dict(message, rows=rows[i:i + ROWS_PER_FRAME])
