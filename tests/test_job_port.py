"""The monitor's two servers (``fastmon.framed_server`` under the ranks' channel and the job
link) hold against whoever reaches them: connections that never prove the secret are
closed on a deadline, a process out of file descriptors goes on accepting, a squatter on
the job port only delays a node, and nothing a peer does (or stops doing) stops the
monitor's own threads."""

from __future__ import annotations

import json
import resource
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from conftest import SCRIPTS
from fastmon import job_link
from fastmon.channel import ChannelServer
from fastmon.common import wire
from fastmon.job_link import JobServer, NodeClient, listen_host

SECRET = "s3cret"


class Starved:
    """tests/scripts/starved_server.py: a server in a process of 1,024 descriptors."""

    def __init__(self, kind: str, fds: int = 1024) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SCRIPTS / "starved_server.py"), kind, "--fds", str(fds)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = json.loads(self.proc.stdout.readline())
        self.heard: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.heard.append(json.loads(line))

    def cpu_since_ready(self) -> float:
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=20)
        self._reader.join(timeout=5)
        # (a peer's last message may be printed after it)
        return next(m["cpu"] for m in reversed(self.heard) if "t" not in m) - self.ready["cpu"]


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def hold_open(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that connect and never say a word."""
    held = []
    for _ in range(count):
        conn = socket.socket()
        conn.setblocking(False)
        conn.connect_ex(("127.0.0.1", port))
        held.append(conn)
    return held


def closed_by_peer(conn: socket.socket) -> bool:
    try:
        while True:
            data = conn.recv(65536, socket.MSG_DONTWAIT)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.fixture
def many_fds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4500:
        pytest.skip(f"this test holds 2,000 connections open; the hard limit here is {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (4500 if hard == resource.RLIM_INFINITY else min(hard, 8192), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.e2e
def test_2000_connections_held_open_do_not_keep_a_real_node_out_nor_take_a_core(many_fds):
    server = Starved("job")
    held = []
    try:
        start = time.monotonic()
        held = hold_open(server.ready["port"], 2000)
        said = []
        node = NodeClient(("127.0.0.1", server.ready["port"]), 1, SECRET, lambda m: None, said.append)
        node.start()
        node.put({"t": "rows", "rows": [[0, 1, 1.0, 0.5]]})
        assert wait_for(lambda: any(m.get("t") == "rows" for m in server.heard), 20), said
        time.sleep(max(0.0, 6 - (time.monotonic() - start)))
        node.close(0)
        wall = time.monotonic() - start
        cpu = server.cpu_since_ready()
        assert cpu / wall < 0.10, f"the job port's process used {cpu:.2f} s of CPU in {wall:.1f} s"
    finally:
        for conn in held:
            conn.close()
        server.proc.kill()


def test_a_slow_hello_is_closed_within_2_s_and_200_idle_connections_within_20_s():
    server = JobServer(SECRET, "127.0.0.1", 0, lambda *a: None, lambda *a: None, lambda host: None)
    server.start()
    try:
        slow = socket.create_connection(("127.0.0.1", server.port))
        slow.sendall(b"\x00\x00")  # half a frame's header, and the rest never
        idle = hold_open(server.port, 200)
        opened = time.monotonic()
        assert wait_for(lambda: closed_by_peer(slow), 2.0), "a slowloris hello still open after 2 s"
        assert wait_for(lambda: all(closed_by_peer(c) for c in idle), 20 - (time.monotonic() - opened))
        assert server.refused == 201
    finally:
        server.close()


@pytest.mark.e2e
def test_a_channel_out_of_descriptors_goes_on_listening():
    server = Starved("channel", fds=64)
    clients = []
    try:
        for _ in range(80):  # past what the process may open: accept() fails with EMFILE
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.setblocking(False)
            conn.connect_ex(server.ready["path"])
            clients.append(conn)
        time.sleep(0.5)
        for conn in clients:
            conn.close()
        time.sleep(2)  # the deadline has closed what it accepted
        rank = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        rank.connect(server.ready["path"])
        rank.sendall(wire.encode({"t": "hello", "rank": 0, "secret": server.ready["secret"]}))
        assert wait_for(lambda: any(m.get("t") == "hello" for m in server.heard), 5), "a rank was not heard after"
        rank.close()
    finally:
        server.proc.kill()


def test_a_node_retries_past_a_squatter_and_joins_once_it_leaves():
    squatter = socket.create_server(("127.0.0.1", 0))
    port = squatter.getsockname()[1]
    said, stop = [], threading.Event()

    answers = [b"HTTP/1.1 400 Bad Request\r\n\r\n",  # another program's
               wire.encode({"t": "challenge", "nonce": "n"}),  # then it hangs up on the proof
               struct.pack("!I", 3000) + b"[" * 3000]  # JSON nested past Python's recursion limit

    def squat():
        squatter.settimeout(0.2)
        tries = 0
        while not stop.is_set():
            try:
                conn, _ = squatter.accept()
            except socket.timeout:
                continue
            conn.sendall(answers[tries % len(answers)])
            tries += 1
            if tries % len(answers) == 2:
                conn.recv(4096)
            conn.close()

    squatting = threading.Thread(target=squat)
    squatting.start()
    node = NodeClient(("127.0.0.1", port), 1, SECRET, lambda m: None, said.append)
    node.start()
    time.sleep(4)  # each answer tried at least once
    stop.set()
    squatting.join()
    squatter.close()
    heard = []
    server = JobServer(SECRET, "127.0.0.1", port, lambda n, m: heard.append(m), lambda *a: None, lambda host: None)
    server.start()
    try:
        node.put({"t": "rows", "rows": [[0, 1, 1.0, 0.5]]})
        assert wait_for(lambda: any(m["t"] == "rows" for m in heard), 10), said
        assert node.close(0)
        assert len([line for line in said if "not reached" in line]) == 1  # said once, however many tries
    finally:
        server.close()


def test_a_live_change_sent_while_a_node_joins_never_reaches_it_before_its_welcome(monkeypatch):
    proof = job_link.proof

    def slow_proof(secret, who, nonce):  # node 0's own answer takes a while: a busy machine
        if who == "node0":
            time.sleep(0.05)
        return proof(secret, who, nonce)

    monkeypatch.setattr(job_link, "proof", slow_proof)
    server = JobServer(SECRET, "127.0.0.1", 0, lambda *a: None, lambda *a: None, lambda host: None)
    server.start()
    stop = threading.Event()

    def changes():
        while not stop.is_set():
            server.send({"t": "control", "message": {"t": "noop"}})

    changing = threading.Thread(target=changes)
    changing.start()
    try:
        for node in range(1, 6):
            said = []
            client = NodeClient(("127.0.0.1", server.port), node, SECRET, lambda m: None, said.append)
            client.start()
            assert wait_for(lambda: client.ever_connected, 5), said
            assert not client.refused and not any("refused" in line for line in said)
            client.close(0)
    finally:
        stop.set()
        changing.join()
        server.close()


def test_a_node_out_of_room_leaves_out_its_oldest_rows_only_and_counts_them(monkeypatch):
    monkeypatch.setattr(job_link, "PENDING_ROWS", 2_000)
    heard = []
    server = JobServer(SECRET, "127.0.0.1", 0, lambda n, m: heard.append(m), lambda *a: None, lambda host: None)
    port = server.port
    server.close()  # node 0 not there yet: the rows wait
    node = NodeClient(("127.0.0.1", port), 1, SECRET, lambda m: None, lambda text: None)
    node.start()
    node.put({"t": "bye", "rank": 0, "steps": 1})  # a word with no rows at the front
    step = 0
    for _ in range(50):
        node.put({"t": "rows", "rows": [[0, step + i, 1.0, 0.1] for i in range(100)]})
        step += 100
    time.sleep(0.2)
    assert node.unsent_rows == 3_000  # past the cap, the oldest rows go even behind a word without rows
    server = JobServer(SECRET, "127.0.0.1", port, lambda n, m: heard.append(m), lambda *a: None, lambda host: None)
    server.start()
    try:
        for _ in range(100):  # more rows while the backlog streams out
            node.put({"t": "rows", "rows": [[0, step + i, 1.0, 0.1] for i in range(100)]})
            step += 100
        assert node.close(0, wait=20)
        time.sleep(0.3)
        got = [row[1] for m in heard if m.get("t") == "rows" for row in m["rows"]]
        assert len(got) == len(set(got))  # none twice
        assert len(got) + node.unsent_rows == step  # each row either sent or counted as left out
        assert got == sorted(got) and got[-1] == step - 1  # the oldest left out, never the newest
        assert [m["t"] for m in heard if m["t"] != "rows"][:2] == ["joined", "bye"]
    finally:
        server.close()


def test_a_rank_that_stops_reading_never_holds_up_the_monitor():
    channel = ChannelServer(lambda message: None)
    channel.start()
    rank = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        rank.connect(channel.path)
        rank.sendall(wire.encode({"t": "hello", "rank": 0, "secret": channel.secret}))
        assert wait_for(lambda: channel.ranks() == [0], 5)
        # a rank stopped (SIGSTOP) reads nothing: far more than a socket's buffers is sent to it
        sending = threading.Thread(target=lambda: [channel.send({"t": "x", "pad": "p" * 100_000}) for _ in range(200)])
        sending.start()
        sending.join(timeout=5)
        assert not sending.is_alive(), "sending to a rank that does not read blocked the sender"
    finally:
        rank.close()
        channel.close()


def test_the_job_port_listens_where_the_master_address_is_this_hosts():
    assert listen_host("127.0.0.1", None)[0] == ""  # loopback: every interface
    assert listen_host("192.0.2.250", None)[0] == ""  # (TEST-NET-1) not this host's
    assert listen_host("no-such-host.invalid", None)[0] == ""
    assert listen_host("127.0.0.1", "10.1.2.3") == ("10.1.2.3", "10.1.2.3 (--job-addr)")
    own = [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
           if not info[4][0].startswith("127.")]
    if own:
        assert listen_host(own[0], None)[0] == own[0]


def test_two_refusals_that_come_together_are_still_said_once(tmp_path):
    from fastmon.session import RunOptions, Session

    session = Session(RunOptions(target=["train.py"], runs_dir=str(tmp_path)))
    said = []
    session._notice = said.append
    session.hub.job_server = type("Counted", (), {"refused": 2})()  # the server counted both before the first was said
    session.hub.link_refused("192.0.2.7")
    session.hub.link_refused("192.0.2.8")
    assert len([line for line in said if "did not prove the job's secret" in line]) == 1
