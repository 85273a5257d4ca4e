"""The command line's own parsing: fastmon's options, torchrun's, then the script's."""

import pytest

from fastmon.cli import UsageError, split_run_args


def test_options_before_the_script_are_fastmons_and_the_rest_the_scripts():
    own, torchrun, target = split_run_args(["--headless", "--apply", "auto", "train.py", "--apply", "x", "-m", "y"])
    assert own == ["--headless", "--apply", "auto"] and torchrun == []
    assert target == ["train.py", "--apply", "x", "-m", "y"]


def test_torchrun_options_pass_through_in_both_spellings():
    own, torchrun, target = split_run_args(["--nproc_per_node=2", "--nnodes", "1", "--standalone", "-m", "pkg.train",
                                            "--lr", "3"])
    assert torchrun == ["--nproc-per-node=2", "--nnodes", "1", "--standalone"]
    assert target == ["-m", "pkg.train", "--lr", "3"] and own == []


@pytest.mark.parametrize("argv, message", [(["--apply"], "needs a value"), (["-m"], "module name"),
                                           (["--bogus", "t.py"], "unknown option")])
def test_bad_command_lines(argv, message):
    with pytest.raises(UsageError, match=message):
        split_run_args(argv)
