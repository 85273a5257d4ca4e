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


def test_every_option_of_the_installed_torchrun_passes_through():
    # torch 2.13's options a hand-made list refused: read from torchrun's own parser now
    argv = ["--nproc-per-node", "2", "--tee", "3", "-r", "1", "--local-ranks-filter", "0", "--logs-specs", "x",
            "--redirects=3", "--virtual-local-rank", "--headless", "train.py", "--tee", "1"]
    own, torchrun, target = split_run_args(argv)
    assert torchrun == ["--nproc-per-node", "2", "--tee", "3", "-r", "1", "--local-ranks-filter", "0",
                        "--logs-specs", "x", "--redirects=3", "--virtual-local-rank"]
    assert own == ["--headless"] and target == ["train.py", "--tee", "1"]


@pytest.mark.parametrize("argv, message", [(["--apply"], "needs a value"), (["-m"], "module name"),
                                           (["--bogus", "t.py"], "unknown option"),
                                           (["--no-python", "t.py"], "fastmon starts the script itself"),
                                           (["--run-path", "t.py"], "fastmon starts the script itself")])
def test_bad_command_lines(argv, message):
    with pytest.raises(UsageError, match=message):
        split_run_args(argv)
