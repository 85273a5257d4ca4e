"""The link between the monitors of a multi-node job: node 0's monitor listens on TCP
(``JobServer``), every other node's monitor streams its ranks' step rows to it
(``NodeClient``) and passes node 0's live changes on to its ranks.

Only monitors that hold the job's secret (``FASTMON_JOB_SECRET``, or the 0600 file
``FASTMON_JOB_SECRET_FILE`` names) talk: node 0 sends a random challenge, a node answers
with an HMAC of it under the secret, node 0 proves itself the same way; the secret itself
never crosses the network. The server under node 0's end (admission deadline, limits,
queued writes) is ``fastmon.framed_server``'s, as the ranks' channel's. Each node keeps its
own complete record whatever the link does.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import stat
import threading
import time

from fastmon.common import wire
from fastmon.framed_server import HELLO_MAX, FramedServer, Peer, Protocol

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


def listen_host(master: str, given: str | None) -> tuple[str, str]:
    """Where node 0's job port listens, and how to say it: ``given`` (--job-addr), else the
    master address where it is one of this host's own and not loopback, else every
    interface ("")."""
    if given:
        return given, f"{given} (--job-addr)"
    try:
        infos = socket.getaddrinfo(master, None, type=socket.SOCK_STREAM)
    except OSError:
        return "", f"every interface (the master address {master} does not resolve here; --job-addr names one)"
    for family, _, _, _, sockaddr in infos:
        if ipaddress.ip_address(sockaddr[0].partition("%")[0]).is_loopback:
            continue
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((sockaddr[0], 0))
        except OSError:
            continue  # not this host's
        return sockaddr[0], f"the master address {master} ({sockaddr[0]})"
    return "", f"every interface (the master address {master} is not one of this host's, or loopback; " \
               "--job-addr names one)"


class _NodeProtocol(Protocol):
    """Node 0's side of the proof (challenge, answer, node 0's own answer), then a node's
    rows and words go to ``on_message(node, message)``; a node silent for ``LOST_AFTER``
    s is dropped and said lost."""

    def __init__(self, secret: str, on_message, on_lost, on_refused) -> None:
        self.secret = secret
        self.on_message, self.on_lost, self.on_refused = on_message, on_lost, on_refused
        self.nodes: dict[int, Peer] = {}
        self.lock = threading.Lock()

    def opened(self, server, peer):
        peer.state["nonce"] = secrets.token_hex(16)
        server.send([peer], {"t": "challenge", "nonce": peer.state["nonce"]})

    def admit(self, server, peer, hello):
        node, mac, nonce = hello.get("node"), hello.get("proof"), hello.get("nonce")
        if (hello.get("t") != "hello" or type(node) is not int or node < 1 or not isinstance(mac, str)
                or not isinstance(nonce, str)
                or not hmac.compare_digest(mac, proof(self.secret, f"node{node}", peer.state["nonce"]))):
            return None
        old = self.nodes.get(node)
        if old is not None and not old.closing and not old.state.get("ended"):
            # proven, but its place holds: it may try again once the old link is seen gone
            server.close_after_send(peer, {"t": "taken"})
            return None
        # queued before the node is listed: no live change can reach it ahead of its welcome
        server.send([peer], {"t": "welcome", "proof": proof(self.secret, "node0", nonce)})
        with self.lock:
            self.nodes[node] = peer
        self.on_message(node, {"t": "joined", "address": peer.address[0]})
        return node

    def heard(self, server, peer, message):
        if message.get("t") == "end":
            peer.state["ended"] = True
        if message.get("t") != "alive":  # (it has done its work: ``heard``)
            self.on_message(peer.name, message)
        return True

    def dropped(self, server, peer, refused):
        if not peer.admitted:
            if refused:
                self.on_refused(peer.address[0] if isinstance(peer.address, tuple) else str(peer.address))
        elif not peer.state.get("ended"):
            self.on_lost(peer.name, time.time())

    def tick(self, server, now):
        for peer in [p for p in server.admitted() if now - p.heard > LOST_AFTER]:
            server.drop(peer, refused=False)

    def linked(self) -> list[Peer]:
        with self.lock:
            return [p for p in self.nodes.values() if not p.closing and not p.state.get("ended")]


class JobServer:
    """Node 0's end: proves and admits the other nodes' monitors, hands their messages to
    ``on_message(node, message)``, says a node lost with ``on_lost(node, when)`` and a
    connection refused with ``on_refused(host)``."""

    def __init__(self, secret: str, host: str, port: int, on_message, on_lost, on_refused) -> None:
        self._nodes = _NodeProtocol(secret, on_message, on_lost, on_refused)
        listener = socket.create_server((host, port), backlog=128)
        self.port = listener.getsockname()[1]
        self._server = FramedServer(listener, self._nodes, "fastmon-job-server")

    @property
    def refused(self) -> int:
        """Connections that did not prove the secret in time, or sent what no node sends."""
        return self._server.refused

    def start(self) -> None:
        self._server.start()

    def nodes(self) -> list[int]:
        return sorted(peer.name for peer in self._nodes.linked())

    def send(self, message: dict) -> int:
        """Queue for every node linked; returns how many it was queued for."""
        return self._server.send(self._nodes.linked(), message)

    def close(self) -> None:
        self._server.close()


class _Refused(Exception):
    """Node 0 did not take this node's proof (the job secrets differ)."""


class NodeClient:
    """A node's end (node ≥ 1): reaches node 0's monitor (retrying, whatever failed, until the
    job ends), proves the secret, streams what ``put`` is given, hands node 0's messages to
    ``on_message``."""

    def __init__(self, address: tuple[str, int], node: int, secret: str, on_message, say) -> None:
        self.address, self.node = address, node
        self._secret, self._on_message, self._say = secret, on_message, say
        self._pending: collections.deque = collections.deque()  # frames' messages, oldest first
        self._pending_rows = 0
        self.unsent_rows = 0  # rows left out while node 0 could not be reached for long
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._ending = False
        self.connected = False
        self.ever_connected = False
        self.rows_sent = 0
        self.refused = False  # node 0 did not take this node's proof when last tried: the secrets differ
        self._told: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="fastmon-node-link", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, message: dict) -> None:
        with self._lock:
            for part in _split_rows(message):  # a frame each: one sent is sent whole, or not at all
                self._pending.append(part)
                self._pending_rows += len(part.get("rows") or ())
            while self._pending_rows > PENDING_ROWS:
                oldest = next(i for i, m in enumerate(self._pending) if m.get("rows"))
                left_out = self._pending[oldest]
                del self._pending[oldest]  # (the words between rows stay: the end, a node's bye)
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
        while not self._stop.is_set():
            try:
                conn = self._connect()
            except _Refused:
                self.refused = True
                self._tell_once("refused", f"node 0's monitor at {where} refused this node's proof (the job "
                                "secrets differ): retrying until the job ends; meanwhile this node's ranks are in "
                                "its own record only")
            except Exception as exc:  # whatever answers there (a squatter, a restart): try again
                self._tell_once(type(exc).__name__, f"node 0's monitor at {where} not reached ({_why(exc)}); "
                                f"retrying every {RETRY_EVERY:g} s until the job ends (node 0 needs the job's "
                                "secret too, and it listens at the master port + 1 unless --job-port, the same on "
                                "every node, says otherwise); this node's record is kept whatever happens")
            else:
                self.refused = False
                if self._stream_until_broken(conn, where):
                    return
            if self._ending:
                return  # node 0 is not there at the end: this node's record has it all
            self._stop.wait(RETRY_EVERY)

    def _stream_until_broken(self, conn: socket.socket, where: str) -> bool:
        """Stream on ``conn``; True at the end, False once it broke (said once per cause)."""
        self.connected = self.ever_connected = True
        self._tell_once("joined", f"streaming this node's ranks to node 0's monitor at {where}")
        try:
            return self._stream(conn)
        except Exception as exc:
            self._tell_once(f"broke {type(exc).__name__}", f"the link to node 0's monitor broke ({_why(exc)}); "
                            "reconnecting (said once)")
            return False
        finally:
            self.connected = False
            conn.close()

    def _connect(self) -> socket.socket:
        """A proven connection to node 0."""
        conn = socket.create_connection(self.address, timeout=5.0)
        try:
            reader = wire.FrameReader(HELLO_MAX)
            challenge = self._receive(conn, reader)
            nonce = secrets.token_hex(16)
            _send(conn, {"t": "hello", "node": self.node, "nonce": nonce,
                         "proof": proof(self._secret, f"node{self.node}", str(challenge.get("nonce")))})
            try:
                welcome = self._receive(conn, reader)
            except ConnectionError:
                raise _Refused() from None  # closed on the proof: the secrets differ
            if welcome.get("t") == "taken":
                raise OSError(f"node {self.node}'s earlier link is still open there")
            if welcome.get("t") != "welcome" or not hmac.compare_digest(str(welcome.get("proof")),
                                                                         proof(self._secret, "node0", nonce)):
                raise _Refused()
        except BaseException:
            conn.close()
            raise
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
                if not isinstance(messages[0], dict):
                    raise ValueError("not a fastmon frame")
                return messages[0]

    def _stream(self, conn: socket.socket) -> bool:
        """Send until the end (True) or until the connection breaks (raises). A message is
        taken off the queue to be sent and put back at its front if the sending fails."""
        reader = wire.FrameReader()
        last_sent = 0.0
        while not self._stop.is_set():
            with self._lock:
                message = self._pending.popleft() if self._pending else None
                rows = len(message.get("rows") or ()) if message else 0
                self._pending_rows -= rows
            if message is not None:
                conn.settimeout(5.0)
                try:
                    conn.sendall(wire.encode(message))
                except BaseException:
                    with self._lock:
                        self._pending.appendleft(message)
                        self._pending_rows += rows
                    raise
                conn.settimeout(0.2)
                self.rows_sent += rows
                last_sent = time.monotonic()
                if message.get("t") == "end":
                    return True
            elif time.monotonic() - last_sent >= ALIVE_EVERY:
                conn.settimeout(5.0)
                _send(conn, {"t": "alive"})
                conn.settimeout(0.2)
                last_sent = time.monotonic()
            try:
                data = conn.recv(1 << 16, socket.MSG_DONTWAIT) if self._pending else conn.recv(1 << 16)
            except (socket.timeout, BlockingIOError):
                data = None
            if data == b"":
                raise ConnectionResetError("node 0's monitor closed the link")
            for received in reader.feed(data) if data else ():
                self._on_message(received)
            if not self._pending:
                self._wake.wait(0.2)
                self._wake.clear()
        return True


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _split_rows(message: dict):
    rows = message.get("rows")
    if not rows or len(rows) <= ROWS_PER_FRAME:
        yield message
        return
    for i in range(0, len(rows), ROWS_PER_FRAME):
        yield dict(message, rows=rows[i:i + ROWS_PER_FRAME])
