"""The monitor's assembly of step rows from a probe's event log (fastmon.common.step_events),
on logs written the way the probe writes them."""

from __future__ import annotations

import socket
from array import array

import pytest

from fastmon.common import wire
from fastmon.common.phases import PHASES, STEP_FIELDS
from fastmon.probe import publisher as publisher_module
from fastmon.probe.publisher import Publisher
from fastmon.common.step_events import (COMM_TAIL, ENTER, FORWARD_EVAL, FORWARD_EVAL_GRAD, FORWARD_TRAIN, GAP_IS_DATA, LEAVE,
                                 LEAVE_AS, LEAVE_BATCH, LEAVE_STEP_END, RESUMED, UNTIMED_STEPS, StepAssembler)

MS = 1_000_000  # ns
DATA_WAIT, H2D, FORWARD, BACKWARD, OPTIMIZER, SYNC, COMM, OTHER = range(len(PHASES))


def log(*events) -> bytes:
    return array("q", [v for event in events for v in event]).tobytes()


def as_dicts(rows) -> list[dict]:
    return [dict(zip(STEP_FIELDS, row)) for row in rows]


def one_step(t0: int, step: int, samples: int = 32) -> list[tuple]:
    """A plain step starting at t0 ms: 2 ms data, 1 other, 3 forward (an .item() of 1 ms
    inside), 4 backward, 1 other, 2 optimizer: 13 ms."""
    t = t0 * MS
    return [(ENTER + DATA_WAIT, t), (LEAVE_BATCH, t + 2 * MS, samples),
            (FORWARD_TRAIN, t + 3 * MS), (ENTER + SYNC, t + 4 * MS), (LEAVE, t + 5 * MS), (LEAVE, t + 6 * MS),
            (ENTER + BACKWARD, t + 6 * MS), (LEAVE, t + 10 * MS),
            (ENTER + OPTIMIZER, t + 11 * MS), (LEAVE_STEP_END, t + 13 * MS, step)]


def test_each_nanosecond_goes_to_the_innermost_open_phase():
    rows = as_dicts(StepAssembler(rank=0).feed(log(*one_step(0, 0), *one_step(13, 1)), perf0=0, wall0=100.0))
    assert [r["step"] for r in rows] == [0, 1]
    second = rows[1]
    assert second["wall"] == pytest.approx(0.013)
    expected = {"data_wait": 2, "forward": 2, "sync": 1, "backward": 4, "optimizer": 2, "other": 2}
    for phase in PHASES:
        assert second[phase] == pytest.approx(expected.get(phase, 0) / 1000)
    assert sum(second[p] for p in PHASES) == pytest.approx(second["wall"])
    assert second["samples"] == 32 and second["micro_batches"] == 1 and second["sync_calls"] == 1
    assert second["t_end"] == pytest.approx(100.026)


def test_a_validation_pass_between_steps_is_not_the_training_samples():
    # After step 0: two validation batches of 128 under no_grad (eval forwards), then the
    # next training batch of 32; step 2 fine-tunes in eval mode with autograd on; step 3
    # trains plain tensors, no forward seen.
    validation = [(ENTER + DATA_WAIT, 13 * MS), (LEAVE_BATCH, 14 * MS, 128), (FORWARD_EVAL, 14 * MS),
                  (LEAVE, 15 * MS), (ENTER + DATA_WAIT, 15 * MS), (LEAVE_BATCH, 16 * MS, 128),
                  (FORWARD_EVAL, 16 * MS), (LEAVE, 17 * MS)]
    frozen_bn = [(ENTER + DATA_WAIT, 30 * MS), (LEAVE_BATCH, 31 * MS, 16), (FORWARD_EVAL_GRAD, 31 * MS),
                 (LEAVE, 32 * MS), (ENTER + OPTIMIZER, 32 * MS), (LEAVE_STEP_END, 33 * MS, 2)]
    plain = [(ENTER + DATA_WAIT, 33 * MS), (LEAVE_BATCH, 34 * MS, 8), (ENTER + BACKWARD, 34 * MS),
             (LEAVE, 35 * MS), (ENTER + OPTIMIZER, 35 * MS), (LEAVE_STEP_END, 36 * MS, 3)]
    events = one_step(0, 0) + validation + one_step(17, 1) + frozen_bn + plain
    rows = as_dicts(StepAssembler(0).feed(log(*events), perf0=0, wall0=0.0))
    assert [r["samples"] for r in rows] == [32, 32, 16, 8]
    assert rows[1]["eval_forwards"] == 2


def test_untimed_steps_between_timed_ones_get_their_wall_time_and_no_phases():
    # steps 0 and 4 timed; 1..3 untimed, ending 10, 25 and 32 ms after step 0's end
    events = one_step(0, 0) + [(UNTIMED_STEPS, 1, 3, 23 * MS, 38 * MS, 45 * MS, -1, -1, -1)] + one_step(45, 4, samples=16)
    whole = log(*events)
    rows = as_dicts(StepAssembler(0).feed(whole, perf0=0, wall0=0.0))
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["timed"] for r in rows] == [1, 0, 0, 0, 1]
    assert [r["wall"] for r in rows[1:4]] == pytest.approx([0.010, 0.015, 0.007])
    for row in rows[1:4]:
        assert all(row[p] is None for p in PHASES) and row["micro_batches"] is None
        assert row["samples"] == 32  # the timed step's before them
    assert rows[4]["wall"] == pytest.approx(0.013) and rows[4]["samples"] == 16
    # cut anywhere, even inside the run of untimed ends, the frames give the same rows
    for cut in range(8, len(whole), 8):
        assembler = StepAssembler(0)
        assert as_dicts(assembler.feed(whole[:cut], 0, 0.0) + assembler.feed(whole[cut:], 0, 0.0)) == rows


def test_a_gans_untimed_steps_are_given_the_samples_of_their_kind():
    # the discriminator's steps (even) take the batch of 16, the generator's (odd) none
    def gan_step(step: int) -> list[tuple]:
        t = step * 2 * MS
        batch = [(ENTER + DATA_WAIT, t), (LEAVE_BATCH, t + MS // 2, 16)] if step % 2 == 0 else []
        return batch + [(FORWARD_TRAIN, t + MS // 2), (LEAVE, t + MS), (ENTER + OPTIMIZER, t + MS),
                        (LEAVE_STEP_END, t + 2 * MS, step)]

    timed_first = [event for step in range(20) for event in gan_step(step)]
    untimed = [(UNTIMED_STEPS, 20, 5, *(2 * MS * (step + 1) for step in range(20, 25)), *[-1] * 5)]  # no loader read
    rows = as_dicts(StepAssembler(0).feed(log(*timed_first, *untimed), perf0=0, wall0=0.0))
    assert [r["samples"] for r in rows[20:]] == [16, 0, 16, 0, 16]


def test_time_before_the_first_activity_belongs_to_no_step():
    # The first step starts at its first event: imports and model building are not in it.
    rows = as_dicts(StepAssembler(0).feed(log(*one_step(500, 0)), perf0=0, wall0=0.0))
    assert rows[0]["wall"] == pytest.approx(0.013 - 0.002)  # step 0's "other" is before anything opened
    assert sum(rows[0][p] for p in PHASES) == pytest.approx(rows[0]["wall"])


def test_an_event_cut_at_a_frame_boundary_is_completed_by_the_next_frame():
    whole = log(*one_step(0, 0), *one_step(13, 1))
    assembler = StepAssembler(0)
    cut = len(whole) // 2 + 8  # mid-event
    rows = assembler.feed(whole[:cut], 0, 0.0) + assembler.feed(whole[cut:], 0, 0.0)
    assert as_dicts(rows) == as_dicts(StepAssembler(0).feed(whole, 0, 0.0))


def test_a_gap_in_the_log_drops_the_incomplete_step_and_counts_the_lost_ones():
    assembler = StepAssembler(0)
    assembler.feed(log(*one_step(0, 0), *one_step(13, 1)), 0, 0.0)
    # steps 2..4 were lost in the probe; the frame after the gap starts inside step 5
    rows = as_dicts(assembler.feed(log(*one_step(70, 5)[4:], *one_step(83, 6)), 0, 0.0, gap=True))
    assert [r["step"] for r in rows] == [6]
    assert assembler.dropped == 4  # 2, 3, 4 and the incomplete 5
    assert rows[0]["wall"] == pytest.approx(0.013)


def test_a_suspended_stretch_is_in_no_step():
    events = one_step(0, 0) + [(RESUMED, 1000 * MS)] + one_step(1000, 1)
    rows = as_dicts(StepAssembler(0).feed(log(*events), 0, 0.0))
    assert rows[1]["wall"] == pytest.approx(0.013)


def test_ddp_tail_and_a_custom_batch_function_and_a_copy_that_stayed_on_the_host():
    t = 0
    events = [(ENTER + OPTIMIZER, t), (LEAVE_STEP_END, t + MS, 0),  # step 0, for a start
              (GAP_IS_DATA, 4 * MS),  # 3 ms building a batch without a DataLoader
              (ENTER + H2D, 4 * MS), (LEAVE_AS, 5 * MS, -1),  # a .to() that did not cross: not h2d
              (FORWARD_TRAIN, 5 * MS), (LEAVE, 6 * MS),
              (ENTER + BACKWARD, 6 * MS), (LEAVE, 10 * MS), (COMM_TAIL, 8 * MS),  # all-reduce after 8 ms
              (FORWARD_EVAL, 10 * MS), (LEAVE, 11 * MS),
              (ENTER + OPTIMIZER, 11 * MS), (LEAVE_STEP_END, 12 * MS, 1)]
    row = as_dicts(StepAssembler(0).feed(log(*events), 0, 0.0))[1]
    assert row["data_wait"] == pytest.approx(0.003)
    assert row["h2d"] == 0 and row["other"] == pytest.approx(0.001)
    assert row["backward"] == pytest.approx(0.002) and row["comm"] == pytest.approx(0.002)
    assert row["forward"] == pytest.approx(0.002) and row["eval_forwards"] == 1 and row["micro_batches"] == 1


def test_an_unknown_event_code_is_an_error_not_a_wrong_number():
    with pytest.raises(ValueError, match="unknown step event code"):
        StepAssembler(0).feed(log((99, 0)), 0, 0.0)


def test_a_log_past_its_bound_is_dropped_and_the_next_frame_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(publisher_module, "MAX_LOG_INTS", 50)
    path = str(tmp_path / "channel")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    publisher = Publisher(path, rank=0)  # not started: the test drives its flushes
    monitor, _ = server.accept()
    assembler = StepAssembler(0)
    reader = wire.FrameReader()

    def received() -> list[dict]:
        publisher.flush()
        monitor.settimeout(2)
        frames = reader.feed(monitor.recv(1 << 20))
        rows = []
        for frame in frames:
            rows += assembler.feed(frame["log"], frame["perf0"], frame["wall0"], frame["gap"])
        return [r[STEP_FIELDS.index("step")] for r in rows]

    for step in range(2):
        for event in one_step(13 * step, step):
            publisher.put_event(event)
    assert received() == [0, 1]
    for step in range(2, 6):  # 22 ints a step: past the bound of 50
        for event in one_step(13 * step, step):
            publisher.put_event(event)
    publisher.flush()
    for step in range(6, 8):
        for event in one_step(13 * step, step):
            publisher.put_event(event)
    # Step 6 follows the gap: whether it began before it is unknown, so it is not trusted.
    assert received() == [7]
    assert assembler.dropped == 5
    publisher.close()
    server.close()


def test_the_log_travels_as_its_bytes_beside_json_frames_and_anything_else_is_refused():
    events = array("q", [ENTER + FORWARD, 5 * MS, LEAVE, 7 * MS])
    stream = wire.encode({"t": "fact", "key": "k", "value": 1}) + wire.encode_events(events, 3, 11, 1.5, True)
    reader = wire.FrameReader()
    first, second = reader.feed(stream[:9]) + reader.feed(stream[9:])  # split mid-frame, as a socket may
    assert first == {"t": "fact", "key": "k", "value": 1}
    assert second == {"t": "events", "rank": 3, "perf0": 11, "wall0": 1.5, "gap": True, "log": events.tobytes()}
    body = b"\x80\x04K\x01."  # a pickle
    with pytest.raises(ValueError, match="neither JSON nor an event log"):
        wire.FrameReader().feed(len(body).to_bytes(4, "big") + body)


def test_a_sleep_before_the_first_forward_stays_other_and_the_rest_of_the_gap_is_the_batchs_making():
    # a loop without a DataLoader: 3 ms making the batch, 5 ms in time.sleep, then the forward
    events = [(ENTER + OPTIMIZER, 0), (LEAVE_STEP_END, MS, 0),
              (ENTER + OTHER, 4 * MS), (LEAVE, 9 * MS),  # the sleep, as the probe wraps it
              (GAP_IS_DATA, 10 * MS), (FORWARD_TRAIN, 10 * MS), (LEAVE, 12 * MS),
              (ENTER + OPTIMIZER, 12 * MS), (LEAVE_STEP_END, 13 * MS, 1)]
    (_, row) = as_dicts(StepAssembler(0).feed(log(*events), 0, 0.0))
    assert row["other"] == pytest.approx(0.005) and row["data_wait"] == pytest.approx(0.004)
    assert sum(row[p] for p in PHASES) == pytest.approx(row["wall"])


def test_comm_inside_the_forward_is_told_apart_from_the_backwards():
    events = [(FORWARD_TRAIN, 0), (ENTER + COMM, MS), (LEAVE, 3 * MS), (LEAVE, 4 * MS),  # an all-gather: 2 ms
              (ENTER + BACKWARD, 4 * MS), (ENTER + COMM, 5 * MS), (LEAVE, 6 * MS), (LEAVE, 7 * MS),  # 1 ms
              (ENTER + OPTIMIZER, 7 * MS), (LEAVE_STEP_END, 8 * MS, 0)]
    (row,) = as_dicts(StepAssembler(0).feed(log(*events), 0, 0.0))
    assert row["comm"] == pytest.approx(0.003) and row["comm_in_forward"] == pytest.approx(0.002)


def test_a_sleep_inside_a_phase_is_that_phases_time():
    # a dataset that sleeps for its slow disk, loaded in the training process: data_wait
    events = [(ENTER + DATA_WAIT, 0), (ENTER + OTHER, MS), (LEAVE, 5 * MS), (LEAVE_BATCH, 6 * MS, 32),
              (FORWARD_TRAIN, 6 * MS), (LEAVE, 8 * MS), (ENTER + OPTIMIZER, 8 * MS), (LEAVE_STEP_END, 9 * MS, 0)]
    (row,) = as_dicts(StepAssembler(0).feed(log(*events), 0, 0.0))
    assert row["data_wait"] == pytest.approx(0.006) and row["other"] == 0
