"""The monitor's end of the channel: a Unix socket in a private (0700) directory.

A socket path rather than an inherited socketpair, because under torchrun the probes
are grandchildren and several of them (one per rank) connect. Each connection speaks
length-prefixed JSON frames (``fastmon.common.wire``); the first message says which rank it is
and carries the run's secret, which the probes inherit in their environment
(``FASTMON_SECRET``, never on a command line). A connection without it, with a frame that
cannot be read, or claiming a rank already connected is closed and counted (``refused``);
nothing another process sends can end the reader or take a rank's place. The server under
it (deadlines, limits, queued writes) is ``fastmon.framed_server``'s, as the job link's.

A socket's path may hold 107 bytes: where TMPDIR's is too long for it, the folder goes in
/tmp (or /dev/shm), still private to this user.
"""

from __future__ import annotations

import hmac
import os
import secrets
import shutil
import socket
import tempfile
import threading

from fastmon.framed_server import FramedServer, Peer, Protocol

# A probe sends its hello as it connects; the folder is this user's alone, so a slow start
# on a loaded machine is what this allows for, not a stranger
RANK_ADMIT_WITHIN = 10.0
WATCH = "watch"  # the name of a fastmon watch's connection (a rank's is its number)
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


class _RankProtocol(Protocol):
    """A probe says hello once, with the run's secret, for a rank not connected yet; then
    its messages go to ``on_message``, each with its rank. A ``fastmon watch`` says "watch"
    with the watch secret (in the run's record, its owner's alone); then each command it
    sends is answered, from a thread of its own, by ``on_command(do, advice_id)``."""

    def __init__(self, on_message, on_command) -> None:
        self.on_message = on_message
        self.on_command = on_command
        self.secret = secrets.token_hex(16)
        self.watch_secret = secrets.token_hex(16)  # a different one: a watch is no rank
        self.ranks: dict[int, Peer] = {}
        self.watchers = 0  # connected now
        self.lock = threading.Lock()
        self.failed_messages = 0

    def admit(self, server, peer, hello):
        secret, rank = hello.get("secret"), hello.get("rank")
        if hello.get("t") == "watch":
            if self.on_command is None or not isinstance(secret, str) \
                    or not hmac.compare_digest(secret, self.watch_secret):
                return None
            with self.lock:
                self.watchers += 1
            return WATCH
        if hello.get("t") != "hello" or not isinstance(secret, str) or not hmac.compare_digest(secret, self.secret):
            return None
        if type(rank) is not int or rank < 0:
            return None
        with self.lock:
            if rank in self.ranks:
                return None
            self.ranks[rank] = peer
        self.heard(server, peer, {k: v for k, v in hello.items() if k != "secret"}, rank)
        return rank

    def heard(self, server, peer, message, rank=None):
        if peer.name == WATCH:
            if message.get("t") != "command":
                return False
            threading.Thread(target=self._answer, args=(server, peer, message), daemon=True,
                             name="fastmon-watch-command").start()
            return True
        rank = peer.name if rank is None else rank
        if rank is None or (peer.admitted and message.get("t") == "hello") or message.get("rank", rank) != rank:
            return False
        message.setdefault("rank", rank)  # (its last word, "bye", says how many steps, not whose)
        try:
            self.on_message(message)
        except Exception:
            self.failed_messages += 1
        return True

    def _answer(self, server, peer, message) -> None:
        try:
            refused = self.on_command(message.get("do"), message.get("id"))
        except Exception as exc:  # the watch hears why; the monitor goes on
            refused = f"{type(exc).__name__}: {exc}"
        server.send([peer], {"t": "answer", "refused": refused})

    def dropped(self, server, peer, refused):
        with self.lock:
            if peer.name == WATCH:
                self.watchers -= 1
            elif peer.name is not None and self.ranks.get(peer.name) is peer:
                del self.ranks[peer.name]


class ChannelServer:
    def __init__(self, on_message, on_command=None) -> None:
        self._dir = private_folder()
        os.chmod(self._dir, 0o700)
        self.path = os.path.join(self._dir, "channel.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(64)
        self._ranks = _RankProtocol(on_message, on_command)
        self._server = FramedServer(listener, self._ranks, "fastmon-channel", admit_within=RANK_ADMIT_WITHIN)
        self.secret = self._ranks.secret
        self.watch_secret = self._ranks.watch_secret

    def start(self) -> None:
        self._server.start()

    @property
    def open_connections(self) -> int:
        """The ranks' connections, and those not admitted yet (not the watches')."""
        return self._server.open_connections - self._ranks.watchers

    @property
    def refused(self) -> int:
        """Connections closed for a missing secret, an unreadable frame or a rank taken."""
        return self._server.refused

    @property
    def failed_messages(self) -> int:
        """Messages from a probe that the monitor could not take."""
        return self._ranks.failed_messages

    def ranks(self) -> list[int]:
        with self._ranks.lock:
            return sorted(self._ranks.ranks)

    def send(self, message: dict, rank: int | None = None) -> int:
        """Queue for one rank, or for every rank; returns how many it was queued for."""
        with self._ranks.lock:
            peers = list(self._ranks.ranks.values()) if rank is None else (
                [self._ranks.ranks[rank]] if rank in self._ranks.ranks else [])
        return self._server.send(peers, message)

    def close(self) -> None:
        self._server.close()
        shutil.rmtree(self._dir, ignore_errors=True)
