"""One owner for the monitor's state (fastmon.state_owner): work posted from many threads
runs one at a time, in order; commands answer once the view shows them; a failing piece
of work is reported and the owner goes on. And a real run driven from the channel, the
advisor and several "screens" at once stays consistent."""

from __future__ import annotations

import threading
from collections import Counter
import time

import pytest

from conftest import EXAMPLES
from fastmon.session import RunOptions, Session
from fastmon.state_owner import Busy, StateOwner


def test_work_from_many_threads_runs_one_at_a_time():
    counts = {"n": 0}
    published = []

    def bump():  # a read-modify-write that loses updates when two threads interleave
        n = counts["n"]
        time.sleep(0)
        counts["n"] = n + 1

    owner = StateOwner(lambda: published.append(counts["n"]), lambda work, exc: None)
    owner.start()
    threads = [threading.Thread(target=lambda: [owner.post(bump) for _ in range(500)]) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert owner.ask(lambda: counts["n"]) == 8 * 500
    assert published[-1] == 8 * 500  # the view an asker reads next shows what it waited for
    owner.stop()


def test_a_command_runs_after_what_was_posted_before_it():
    seen = []
    owner = StateOwner(lambda: None, lambda work, exc: None)
    owner.start()
    owner.post(time.sleep, 0.2)
    owner.post(seen.append, "posted")
    assert owner.ask(lambda: list(seen)) == ["posted"]
    owner.stop()


def test_failing_work_is_reported_and_the_owner_goes_on():
    errors, seen = [], []

    def broken():
        raise ValueError("a malformed message")

    owner = StateOwner(lambda: None, lambda work, exc: errors.append((work, repr(exc))))
    owner.start()
    owner.post(broken)
    owner.post(seen.append, 1)
    with pytest.raises(ValueError):
        owner.ask(broken)
    assert owner.ask(lambda: seen) == [1]
    assert errors == [("broken", "ValueError('a malformed message')")] * 2
    owner.stop()
    assert not owner.running


def test_a_command_answered_busy_is_never_run_later():
    ran = []
    owner = StateOwner(lambda: None, lambda work, exc: None)
    owner.start()
    owner.post(time.sleep, 1.0)
    with pytest.raises(Busy):
        owner.ask(ran.append, "apply", timeout=0.1)  # the user is told to try again...
    owner.stop()
    assert ran == []  # ...so it must not also run once the owner gets to it


def test_stop_takes_what_was_posted_and_nothing_after():
    seen = []
    owner = StateOwner(lambda: None, lambda work, exc: None)
    owner.start()
    for i in range(100):
        owner.post(seen.append, i)
    owner.stop()
    owner.post(seen.append, "late")
    assert seen == list(range(100))


def test_timed_work_runs_between_posts():
    ticks = []
    owner = StateOwner(lambda: None, lambda work, exc: None)
    owner.every(0.05, lambda: ticks.append(time.monotonic()))
    owner.start()
    time.sleep(0.5)
    owner.stop()
    assert 5 <= len(ticks) <= 11


@pytest.mark.e2e
def test_a_real_run_driven_from_the_channel_and_several_screens_at_once(tmp_path):
    # The channel's thread brings steps and acks, the advisor ticks, and four "screens"
    # press apply and dismiss as fast as they can, profile once a second: one experiment at a time,
    # every answer a sentence, no work of the owner's fails, the record ends whole.
    options = RunOptions(target=[str(EXAMPLES / "starved.py"), "--epochs", "2", "--samples", "1600"],
                         runs_dir=str(tmp_path / "runs"))
    session = Session(options)
    session.start()
    answers, stop = [], threading.Event()

    def screen(press, every):
        while not stop.wait(every):
            answers.append(press())

    presses = [(lambda: session.apply("dataloader.num_workers"), 0.005), (lambda: session.profile(2), 1.0),
               (lambda: session.apply("dataloader.pin_memory"), 0.005), (lambda: session.dismiss("no.such"), 0.005)]
    screens = [threading.Thread(target=screen, args=press) for press in presses]
    for thread in screens:
        thread.start()
    ended = []
    waiter = threading.Thread(target=lambda: ended.append(session.wait()))  # as the dashboard's worker does
    waiter.start()
    waiter.join(timeout=120)
    stop.set()
    for thread in screens:
        thread.join()
    assert ended == [0]
    view = session.view
    assert not view.events_of("monitor_error")
    assert all(answer is None or isinstance(answer, str) and answer for answer in answers)
    assert [result["exp"] for result in view.applied] == [1]  # one experiment; every other press refused
    assert {a["id"]: a["status"] for a in view.advice}["dataloader.num_workers"] != "applying"
    assert "it is applying already" in answers, Counter(answers)
    assert view.rank(0).steps == sum(session.steps_made.values())
