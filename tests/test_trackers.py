"""`fastmon run --log-to`: fastmon's figures in the script's own TensorBoard folder, beside
its W&B run and in its MLflow run, read back by each tracker's own library."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from conftest import SCRIPTS, run_dirs
from fastmon.cli import EXIT_USAGE
from fastmon.loggers import missing_packages

# MLflow 3 refuses its file store unless asked; the issue asks for the file store.
ENV = {"MLFLOW_ALLOW_FILE_STORE": "true", "WANDB_SILENT": "true"}


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def wandb_records(path: Path):
    """The records of an offline run's .wandb file: W&B's own protobuf Record, in the
    LevelDB log framing W&B writes them in (32 KiB blocks, 7-byte chunk headers)."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, chunks = 7, []
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (kind == 0 and length == 0):
            pos += left
            continue
        chunks.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or its last chunk
            record = Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            yield record


def wandb_run(tmp_path: Path, name: str) -> tuple[object, list[dict]]:
    import json

    for path in (tmp_path / "wandb").glob("offline-run-*/run-*.wandb"):
        records = list(wandb_records(path))
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        if run.display_name == name:
            return run, [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
                         for r in records if r.WhichOneof("record_type") == "history"]
    raise AssertionError(f"no W&B run named {name!r}")


@pytest.mark.e2e
def test_figures_land_beside_the_scripts_own_runs(tmp_path, run_fastmon, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    out = run_fastmon("run", "--headless", "--log-to", "tensorboard,wandb,mlflow", SCRIPTS / "trackers.py",
                      env_extra=ENV)
    assert out.returncode == 0, out.stderr
    assert "--log-to tensorboard: TensorBoard: " in out.stderr and "tb/script/fastmon" in out.stderr

    # TensorBoard: a run "script/fastmon" inside the script's folder, the script's own untouched
    ours, script = tensorboard_scalars(tmp_path / "tb" / "script" / "fastmon"), tensorboard_scalars(tmp_path / "tb" / "script")
    assert set(script) == {"loss"}
    assert {"fastmon/step_ms", "fastmon/samples_per_s", "fastmon/share/backward"} <= set(ours)
    steps = [step for step, _ in ours["fastmon/step_ms"]]
    assert len(steps) >= 2 and steps == sorted(steps) and steps[-1] <= 300
    # each step sleeps 30 ms and takes 128 samples
    assert all(30 <= ms < 300 for _, ms in ours["fastmon/step_ms"])
    assert all(0 < rate <= 128 / 0.030 for _, rate in ours["fastmon/samples_per_s"])

    # W&B: a run of fastmon's in the script run's project, grouped with it
    script_run, _ = wandb_run(tmp_path, "script-run")
    fastmon_run, history = wandb_run(tmp_path, "script-run-fastmon")
    assert fastmon_run.project == script_run.project == "trackers-test"
    assert fastmon_run.run_group == script_run.run_id
    points = [h for h in history if "fastmon/step_ms" in h]
    assert len(points) >= 2 and all(h["fastmon/step_ms"] >= 30 for h in points)

    # MLflow: in the script's own run, beside its loss
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}")
    (run,) = client.search_runs(["0"])
    assert run.info.run_name == "script-run"
    history = client.get_metric_history(run.info.run_id, "fastmon/step_ms")
    assert len(history) >= 2 and all(m.value >= 30 for m in history)
    assert client.get_metric_history(run.info.run_id, "loss")


@pytest.mark.e2e
def test_a_script_that_logs_nowhere_gets_runs_of_fastmons_own(tmp_path, run_fastmon, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    out = run_fastmon("run", "--headless", "--log-to", "tensorboard,mlflow", SCRIPTS / "trackers.py", "--no-trackers",
                      "--steps", "150", "--step-ms", "2", env_extra=dict(ENV, MLFLOW_TRACKING_URI="file:./mlruns"))
    assert out.returncode == 0, out.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert "(the script writes no TensorBoard events)" in out.stderr
    assert tensorboard_scalars(run_dir / "tensorboard")["fastmon/step_ms"]
    from mlflow.tracking import MlflowClient

    (run,) = MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}").search_runs(["0"])
    assert run.info.run_name == run_dir.name and run.info.status == "FINISHED"
    assert "fastmon/samples_per_s" in run.data.metrics


@pytest.mark.e2e
def test_an_unknown_tracker_is_refused_and_a_missing_package_is_a_note(run_fastmon, monkeypatch):
    out = run_fastmon("run", "--log-to", "tensorboard,neptune", SCRIPTS / "trackers.py")
    assert out.returncode == EXIT_USAGE and "unknown tracker 'neptune'" in out.stderr
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    assert missing_packages(["tensorboard", "wandb"]) == [
        "--log-to wandb: the wandb package is not installed here, so nothing is sent there (pip install wandb)"]


@pytest.mark.e2e
def test_a_tracker_that_never_answers_holds_fastmons_exit_five_seconds_at_most(tmp_path, run_fastmon):
    # an MLflow tracking server that accepts and never answers: every call hangs (2 min each)
    import socket
    import time

    def after_the_script(*log_to, **env) -> tuple[float, str]:
        out = run_fastmon("run", "--headless", *log_to, SCRIPTS / "trackers.py", "--no-trackers", "--steps", "150",
                          "--step-ms", "2", env_extra=env)
        returned = time.time()
        assert out.returncode == 0, out.stderr
        return returned - float(out.stdout.split("done at ")[1]), out.stderr

    # against the same tracker answering (a file store): both runs pay mlflow's import
    plain, _ = after_the_script("--log-to", "mlflow", **ENV, MLFLOW_TRACKING_URI=f"file:{tmp_path / 'mlruns'}")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        hung, stderr = after_the_script("--log-to", "mlflow",
                                        MLFLOW_TRACKING_URI=f"http://127.0.0.1:{server.getsockname()[1]}")
    finally:
        server.close()
    assert hung - plain < 5.0, (hung, plain)
    assert "--log-to mlflow did not answer within 4 s of the training's end" in stderr
    assert "Traceback" not in stderr
