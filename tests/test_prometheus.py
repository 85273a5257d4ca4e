"""`--log-to prometheus`: /metrics served during a real run, scraped over a real socket and
read with prometheus_client's own parser."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import SCRIPTS, clean_env, fastmon_cmd, run_dirs

SERVED = re.compile(r"metrics for Prometheus at http://[^:]+:(\d+)/metrics")


class Watched:
    """A fastmon run whose stdout and stderr are read as they come."""

    def __init__(self, args: list, cwd) -> None:
        self.proc = subprocess.Popen(fastmon_cmd(*args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=clean_env())
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=lambda s=stream, keep=lines: keep.extend(s), daemon=True).start()

    def wait_for(self, lines: list[str], pattern, timeout: float = 120) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((m for m in map(re.compile(pattern).search, list(lines)) if m), None)
            if found:
                return found
            assert self.proc.poll() is None or lines is self.out, "".join(self.err)
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} never came: {''.join(self.err)}")

    def port(self) -> int:
        return int(self.wait_for(self.err, SERVED)[1])


def scrape(port: int) -> dict:
    """{(metric sample name, labels as a tuple of pairs): value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def recorded_steps(folder) -> dict[str, int]:
    db = sqlite3.connect(folder / "run.sqlite")
    return {str(rank): n for rank, n in db.execute("SELECT rank, COUNT(*) FROM steps GROUP BY rank")}


def steps_by_rank(samples: dict) -> dict[str, float]:
    return {dict(labels)["rank"]: value for (name, labels), value in samples.items() if name == "fastmon_steps_total"}


@pytest.mark.e2e
def test_two_ranks_are_scraped_live_and_end_at_the_records_counts(tmp_path):
    run = Watched(["run", "--headless", "--log-to", "prometheus", "--metrics-port", "0", "--nproc-per-node", "2",
                   SCRIPTS / "ddp_train.py", "--steps-per-epoch", "150", "--every-rank-ms", "10",
                   "--pause-at-end", "8"], tmp_path)  # 3 s of steps or more: several rounds
    port = run.port()
    deadline = time.monotonic() + 60
    while set(first := steps_by_rank(scrape(port))) != {"0", "1"} or min(first.values()) < 5:
        assert time.monotonic() < deadline, first
        time.sleep(0.3)
    # the counts rise, round after round (1 s each; later on a loaded machine)
    second = scrape(port)
    while not all(steps_by_rank(second)[rank] > first[rank] for rank in ("0", "1")):
        assert time.monotonic() < deadline + 30, (first, steps_by_rank(second))
        time.sleep(0.3)
        second = scrape(port)
    labels = {dict(labels)["run"] for (name, labels), _ in second.items() if name == "fastmon_steps_total"}
    (run_name,) = labels
    assert {dict(labels)["node"] for (name, labels), _ in second.items() if name == "fastmon_steps_total"} == {"0"}
    shares = {dict(labels)["phase"]: value for (name, labels), value in second.items()
              if name == "fastmon_phase_ratio" and dict(labels)["rank"] == "0"}
    assert sum(shares.values()) == pytest.approx(1, abs=0.01) and "comm" in shares
    assert any(name == "fastmon_bound" for name, _ in second)
    run.wait_for(run.out, "rank 0 done")
    run.wait_for(run.out, "rank 1 done")
    ended = time.monotonic() + 6  # the last steps' publisher round comes while the ranks pause 8 s
    while steps_by_rank(last := scrape(port)) != {"0": 300, "1": 300} and time.monotonic() < ended:
        time.sleep(0.3)
    assert run.proc.wait(timeout=120) == 0, "".join(run.err)
    (folder,) = run_dirs(tmp_path)
    assert folder.name == run_name
    assert steps_by_rank(last) == {"0": 300, "1": 300} == recorded_steps(folder)
    summary = {dict(labels)["rank"]: value for (name, labels), value in last.items() if name == "fastmon_step_seconds_count"}
    assert summary == {"0": 300, "1": 300}  # the step-time summary counts every step


@pytest.mark.e2e
def test_two_runs_on_the_default_port_both_serve_and_say_where(tmp_path):
    runs = [Watched(["run", "--headless", "--log-to", "prometheus", "--runs-dir", f"runs{i}",
                     SCRIPTS / "slow_steps.py", "--steps", "150", "--step-ms", "20"], tmp_path) for i in (0, 1)]
    ports = [run.port() for run in runs]
    assert ports[0] != ports[1]
    assert any("is taken" in "".join(run.err) for run in runs)  # the second was told, and given another
    for port in ports:
        deadline = time.monotonic() + 60
        while not steps_by_rank(scrape(port)):  # a series once the first steps reached the monitor
            assert time.monotonic() < deadline
            time.sleep(0.3)
    for run in runs:
        assert run.proc.wait(timeout=120) == 0, "".join(run.err)


@pytest.mark.e2e
def test_the_cluster_recipe_runs_two_nodes_on_one_machine(tmp_path):
    """examples/cluster/fastmon-node.sh, as srun would start it on each of two nodes: one
    rank a node, each node's record in its own folder, merged by the report; with the job's
    secret in a 0600 file, node 0's record holds both nodes' ranks by itself."""
    import json
    import os
    import socket
    import sys

    from conftest import ROOT

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        master_port = s.getsockname()[1]
    env = dict(clean_env(), PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               SLURM_NNODES="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port), METRICS_PORT="0",
               FASTMON_RUNS_DIR=str(tmp_path / "runs"), FASTMON_JOB_SECRET_FILE=str(tmp_path / "job.secret"))
    (tmp_path / "job.secret").write_text("the job's secret\n")
    (tmp_path / "job.secret").chmod(0o600)
    nodes = [subprocess.Popen([ROOT / "examples" / "cluster" / "fastmon-node.sh", SCRIPTS / "ddp_train.py"],
                              cwd=tmp_path, env=dict(env, SLURM_NODEID=str(node)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for node in (0, 1)]
    outputs = [node.communicate(timeout=240) for node in nodes]
    for node, (out, err) in zip(nodes, outputs):
        assert node.returncode == 0, err
        assert SERVED.search(err), err
    runs = [str(next((tmp_path / "runs" / f"node{n}").iterdir())) for n in (0, 1)]
    merged = subprocess.run(fastmon_cmd("report", *runs, "--json"), cwd=tmp_path, capture_output=True, text=True,
                            env=clean_env(), timeout=60)
    assert merged.returncode == 0, merged.stderr
    assert [(r["rank"], r["steps"]) for r in json.loads(merged.stdout)["ranks"]] == [(0, 80), (1, 80)]
    gathered = subprocess.run(fastmon_cmd("report", runs[0], "--json"), cwd=tmp_path, capture_output=True, text=True,
                              env=clean_env(), timeout=60)
    assert [(r["rank"], r["steps"]) for r in json.loads(gathered.stdout)["ranks"]] == [(0, 80), (1, 80)]


def test_a_scrape_flood_renders_the_metrics_once_a_second_at_most(monkeypatch):
    from fastmon import prometheus

    collected = []

    class Counting(prometheus.Metrics):
        def collect(self):
            collected.append(time.monotonic())
            return iter(())

    monkeypatch.setattr(prometheus, "Metrics", Counting)
    server, port, _ = prometheus.serve(lambda: None, "run", "0", 0)
    try:
        start = time.monotonic()
        scrapes = 0
        while time.monotonic() - start < 2.5:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
            scrapes += 1
        assert scrapes > 20 and len(collected) <= 3  # at 0 s, 1 s and 2 s
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).status == 200
    finally:
        server.shutdown()
        server.server_close()
