"""Device-side step timing with CUDA events, resolved without adding a synchronize.

A preallocated ring of ``Event(enable_timing=True)`` sets, one set per step. Marks are
recorded at phase boundaries on the current stream; at each step end only the oldest
pending step's last event is ``query()``-ed, and its elapsed times are read once it has
completed. A full ring drops that step's device timing; nothing is recorded while a
CUDA graph is being captured.
"""

from __future__ import annotations

import torch

RING = 64
MARKS = ("step_start", "forward_start", "forward_end", "backward_end", "step_end")


class EventRing:
    def __init__(self) -> None:
        self.slots = [{m: torch.cuda.Event(enable_timing=True) for m in MARKS} for _ in range(RING)]
        self.recorded: list[set] = [set() for _ in range(RING)]
        self.steps: list[int | None] = [None] * RING
        self.head = 0  # slot of the step being recorded
        self.pending: list[int] = []
        self._begin(0)

    def _begin(self, step: int) -> None:
        if len(self.pending) >= RING - 1:
            self.steps[self.head] = None  # ring full: this step goes without device timing
            return
        self.steps[self.head] = step
        self.recorded[self.head] = set()
        self.mark("step_start")

    def mark(self, name: str) -> None:
        slot = self.head
        if self.steps[slot] is None or torch.cuda.is_current_stream_capturing():
            return
        if name in ("forward_start",) and name in self.recorded[slot]:
            return  # keep the first forward start of the step
        self.slots[slot][name].record()
        self.recorded[slot].add(name)

    def end_step(self, step: int) -> list[dict]:
        slot = self.head
        if self.steps[slot] is not None:
            self.mark("step_end")
            self.pending.append(slot)
        self.head = (self.head + 1) % RING
        self._begin(step + 1)
        return self.resolve()

    def resolve(self) -> list[dict]:
        done = []
        while self.pending:
            slot = self.pending[0]
            events, seen = self.slots[slot], self.recorded[slot]
            if not events["step_end"].query():
                break
            self.pending.pop(0)
            row = {"step": self.steps[slot], "device_step": events["step_start"].elapsed_time(events["step_end"]) / 1e3}
            if {"forward_start", "forward_end"} <= seen:
                row["device_forward"] = events["forward_start"].elapsed_time(events["forward_end"]) / 1e3
            if {"forward_end", "backward_end"} <= seen:
                row["device_backward"] = events["forward_end"].elapsed_time(events["backward_end"]) / 1e3
            if "backward_end" in seen:
                row["device_optimizer"] = events["backward_end"].elapsed_time(events["step_end"]) / 1e3
            if "forward_start" in seen:
                # Time the device sat idle at the start of the step (waiting for data, for the host).
                row["device_idle_before_forward"] = events["step_start"].elapsed_time(events["forward_start"]) / 1e3
            done.append(row)
        return done
