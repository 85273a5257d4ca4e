"""A job across nodes, live on node 0: two `fastmon run` processes as two nodes of one
torchrun job on loopback (CPU, gloo), node 1's ranks streamed to node 0's monitor over the
job's link, which admits only a monitor that proves the job's secret."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time

import pytest

from conftest import SCRIPTS, clean_env, fastmon_cmd
from fastmon.common import wire
from fastmon.tui.app import FastmonApp
from fastmon.tui.snapshot import ReplaySource
from fastmon.tui.widgets.rank_line import RankLine
from fastmon.job_link import HELLO_MAX, JobServer, NodeClient, NoSecret, job_secret, proof

DDP = SCRIPTS / "ddp_train.py"
SECRET = "a job secret for the test"

pytestmark = pytest.mark.skipif(not __import__("torch").distributed.is_available(), reason="no torch.distributed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(tmp_path, node: int, master_port: int, *script_args, secret: str | None = SECRET, script=DDP,
               apply: str = "never"):
    env = clean_env(**({"FASTMON_JOB_SECRET": secret} if secret else {}))
    return subprocess.Popen(
        fastmon_cmd("run", "--headless", "--status-every", "1", "--apply", apply, "--runs-dir", f"node{node}",
                    "--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                    str(master_port), "--node-rank", str(node), script, *script_args),
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        start_new_session=True)  # a group of its own: what a test leaves running is ended with it


def without_torchs_exit_barrier_race(err: str) -> str:
    """stderr less what torchrun's agent logs when the store's host (node 0) ends first.

    The other node's agent then logs "Error waiting on exit barrier" with a traceback, after
    the job ended well (pytorch/pytorch#69520); plain torchrun does the same."""
    return "".join(line for line in err.splitlines(keepends=True)
                   if "torch/distributed/elastic/agent/server/api.py:" not in line)


class Lines:
    """A process's stderr, line by line as it comes."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self._thread.start()

    def wait_for(self, text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in list(self.lines) if text in line]
            if found:
                return found[0]
            time.sleep(0.1)
        raise AssertionError(f"{text!r} not seen in: {''.join(self.lines)[-3000:]}")

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines)


def record_ranks(run_dir) -> dict:
    out = subprocess.run(fastmon_cmd("report", str(run_dir), "--json"), capture_output=True, text=True, timeout=60,
                         env=clean_env())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def intrude(port: int) -> None:
    """What a host that reaches the port without the secret might send: a guess at the
    proof for node 1, then a frame far past what an unproven connection may send."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.recv(HELLO_MAX)
        try:
            conn.sendall(wire.encode({"t": "hello", "node": 1, "nonce": "n", "proof": "0" * 64}))
            conn.sendall(wire.encode({"t": "rows", "rows": [[3, 1, time.time(), 0.1] + [0.0] * 21]}))
            assert conn.recv(HELLO_MAX) == b""  # closed on it
        except ConnectionError:
            pass  # closed on it, what it sent unread
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        try:
            conn.sendall(b"\x00\x10\x00\x00" + b"{" * (1 << 16))
        except ConnectionError:
            pass


@pytest.mark.e2e
def test_node_0_shows_and_records_every_rank_of_two_nodes_and_names_the_straggler(tmp_path):
    master_port = free_port()
    args = ("--slow-rank", "3", "--steps-per-epoch", "120", "--epochs", "3")
    nodes = [start_node(tmp_path, node, master_port, *args) for node in (0, 1)]
    node0 = Lines(nodes[0].stderr)
    node0.wait_for("node 1 joined the live view")
    intrude(master_port + 1)
    during = node0.wait_for(" 4 ranks")  # a status line while the job runs
    for node in nodes:
        assert node.wait(timeout=240) == 0, node.stderr.read() if node.stderr and node is nodes[1] else node0.text()
    said = node0.text()
    assert "refused" in said
    runs = [next((tmp_path / f"node{n}").iterdir()) for n in (0, 1)]
    gathered, own = record_ranks(runs[0]), record_ranks(runs[1])
    steps = {r["rank"]: r["steps"] for r in gathered["ranks"]}
    assert steps == {0: 360, 1: 360, 2: 360, 3: 360}
    assert {r["rank"]: r["steps"] for r in own["ranks"]} == {2: 360, 3: 360}  # node 1's own record, whole
    assert gathered["straggler"] == 3
    assert "straggler rank 3" in said
    link = gathered["job_link"]
    assert link["refused"] >= 1 and link["nodes"]["1"]["ranks"] == [2, 3]
    assert link["nodes"]["1"]["exit_code"] == 0
    step = int(during.split(" step ")[1].split()[0])
    assert step < 360, during  # seen while the job ran, not at its end
    report = subprocess.run(fastmon_cmd("report", str(runs[0])), capture_output=True, text=True, timeout=60,
                            env=clean_env()).stdout
    assert "node 1 (ranks 2, 3): ended with exit code 0" in report and "refused: " in report


@pytest.mark.e2e
async def test_node_1s_monitor_killed_is_said_lost_and_node_0_goes_on(tmp_path):
    master_port = free_port()
    args = ("--steps-per-epoch", "150", "--epochs", "3")
    nodes = [start_node(tmp_path, node, master_port, *args) for node in (0, 1)]
    node0 = Lines(nodes[0].stderr)
    node0.wait_for(" 4 ranks")
    nodes[1].send_signal(signal.SIGKILL)  # the monitor only: its torchrun and ranks go on
    lost = node0.wait_for("node 1 lost at", timeout=30)
    assert "its monitor stopped reporting" in lost
    try:
        node0.wait_for(" step 450 ")  # node 0's training went on to its end
        # torchrun's agent on node 0 then waits at its exit barrier for node 1's agent,
        # which died with its monitor's pipes (README, Limits): stop it as a README says.
        nodes[0].send_signal(signal.SIGTERM)
        try:
            nodes[0].wait(timeout=10)
        except subprocess.TimeoutExpired:  # torchrun at its barrier: the second one kills it
            nodes[0].send_signal(signal.SIGTERM)
            nodes[0].wait(timeout=60)
    finally:
        os.killpg(nodes[1].pid, signal.SIGKILL)  # what is left of node 1, orphaned by the test
    node0.wait_for(", node 1 lost")  # on the status line too
    gathered = record_ranks(next((tmp_path / "node0").iterdir()))
    assert {r["rank"] for r in gathered["ranks"]} == {0, 1, 2, 3}
    assert gathered["job_link"]["nodes"]["1"]["lost"]
    assert {r["rank"]: r["steps"] for r in gathered["ranks"]}[0] == 450
    app = FastmonApp(ReplaySource(next((tmp_path / "node0").iterdir())))
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause(0.5)
        ranks = str(app.query_one(RankLine).render())
        assert "rank 3:" in ranks and "✖ node 1 lost at " in ranks


@pytest.mark.e2e
def test_without_a_secret_each_node_says_why_once_and_keeps_its_record(tmp_path):
    master_port = free_port()
    nodes = [start_node(tmp_path, node, master_port, secret=None) for node in (0, 1)]
    outputs = [node.communicate(timeout=240) for node in nodes]
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err
        assert err.count("[fastmon] no job secret (FASTMON_JOB_SECRET or FASTMON_JOB_SECRET_FILE)") == 1, err
    assert [r["rank"] for r in record_ranks(next((tmp_path / "node0").iterdir()))["ranks"]] == [0, 1]


@pytest.mark.e2e
def test_node_0_applies_a_live_change_on_every_rank_of_both_nodes_at_one_step(tmp_path):
    master_port = free_port()
    nodes = [start_node(tmp_path, node, master_port, "--out", tmp_path / f"seen{node}", "--epochs", "4",
                        script=SCRIPTS / "ddp_starved.py", apply="auto") for node in (0, 1)]
    outputs = [node.communicate(timeout=300) for node in nodes]
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err
    assert "node 1 follows node 0" in outputs[1][1]
    acks = {}
    for node in (0, 1):
        db = sqlite3.connect(next((tmp_path / f"node{node}").iterdir()) / "run.sqlite")
        acks[node] = [json.loads(d) for (d,) in db.execute("SELECT data FROM events WHERE kind = 'applied'")]
        if node == 1:  # it followed: no experiment of its own
            assert db.execute("SELECT count(*) FROM applied").fetchone()[0] == 0
    assert acks[0], "nothing was applied"
    for node, ranks in ((0, 4), (1, 2)):  # node 0 hears every rank's answer, node 1 its own ranks'
        by_change: dict = {}
        for ack in acks[node]:
            assert ack["ok"], ack
            by_change.setdefault((ack["exp"], json.dumps(ack["params"])), []).append(ack["step"])
        for steps in by_change.values():
            assert len(steps) == ranks and len(set(steps)) == 1, by_change  # every rank, one step


@pytest.mark.e2e
@pytest.mark.parametrize("holder", [0, 1])
def test_a_secret_on_one_node_only_is_said_where_it_matters(tmp_path, holder):
    master_port = free_port()
    nodes = [start_node(tmp_path, node, master_port, secret=SECRET if node == holder else None) for node in (0, 1)]
    outputs = [node.communicate(timeout=240) for node in nodes]
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err
        assert "Traceback" not in without_torchs_exit_barrier_race(err)
    if holder == 0:  # node 0 waits for a node that cannot come, and says so
        assert "| 1 of 2 nodes linked" in outputs[0][1]
    else:  # node 1 tried, and says at its end that it never got through
        assert "[fastmon] node 1: node 0's monitor at 127.0.0.1:" in outputs[1][1]
        assert "[fastmon] node 1 never reached node 0's monitor" in outputs[1][1]
        own = record_ranks(next((tmp_path / "node1").iterdir()))
        assert own["job_link"]["reached"] is False and [r["rank"] for r in own["ranks"]] == [2, 3]


def test_the_secret_comes_from_a_file_only_its_owner_may_read(tmp_path):
    path = tmp_path / "job.secret"
    path.write_text("from a file\n")
    path.chmod(0o644)
    with pytest.raises(NoSecret, match="may be read by others"):
        job_secret({"FASTMON_JOB_SECRET_FILE": str(path)})
    path.chmod(0o600)
    assert job_secret({"FASTMON_JOB_SECRET_FILE": str(path)}) == "from a file"
    assert job_secret({"FASTMON_JOB_SECRET": "env first", "FASTMON_JOB_SECRET_FILE": str(path)}) == "env first"
    with pytest.raises(NoSecret, match="no job secret"):
        job_secret({})


def test_only_a_node_that_proves_the_secret_is_heard(tmp_path):
    heard, lost, refused = [], [], []
    server = JobServer(SECRET, "127.0.0.1", 0, lambda node, m: heard.append((node, m)), lambda node, when: lost.append(node),
                       refused.append)
    server.start()
    try:
        intrude(server.port)
        said = []
        wrong = NodeClient(("127.0.0.1", server.port), 1, "another secret", heard.append, said.append)
        wrong.start()
        wrong.close(0, wait=5)
        assert wrong.refused and "refused this node's proof" in said[-1]
        right = NodeClient(("127.0.0.1", server.port), 1, SECRET, heard.append, said.append)
        right.start()
        right.put({"t": "rows", "rows": [[2, 1, 1.0, 0.5]]})
        assert right.close(0, wait=5)
        time.sleep(0.5)
        assert [m["t"] for _, m in heard] == ["joined", "rows", "end"]
        assert server.refused == 3 and lost == []
    finally:
        server.close()


def test_a_node_proves_itself_to_node_0_and_node_0_to_it():
    nonce = "abc"
    assert proof(SECRET, "node1", nonce) != proof(SECRET, "node0", nonce)  # one side's answer never serves the other
    assert proof(SECRET, "node1", nonce) != proof("other", "node1", nonce)

