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
    from torch.distributed.run import get_args_parser

    from fastmon.cli import TORCHRUN_REFUSED, option_values, run_parser

    argv = ["--nproc-per-node", "2", "--tee", "3", "-r", "1", "--redirects=3", "--headless", "train.py", "--tee", "1"]
    own, torchrun, target = split_run_args(argv)
    assert torchrun == ["--nproc-per-node", "2", "--tee", "3", "-r", "1", "--redirects=3"]
    assert own == ["--headless"] and target == ["train.py", "--tee", "1"]
    # each option of this torch's torchrun: a hand-made list refused newer ones (--virtual-local-rank: not in 2.5)
    fastmons = option_values(run_parser())
    for name, takes_value in option_values(get_args_parser()).items():
        if name in TORCHRUN_REFUSED or name in fastmons:
            continue
        given = [name, "1"] if takes_value else [name]
        assert split_run_args([*given, "train.py"]) == ([], [name.replace("_", "-"), *given[1:]], ["train.py"])


@pytest.mark.parametrize("argv, message", [(["--apply"], "needs a value"), (["-m"], "module name"),
                                           (["--bogus", "t.py"], "unknown option"),
                                           (["--no-python", "t.py"], "fastmon starts the script itself"),
                                           (["--run-path", "t.py"], "fastmon starts the script itself")])
def test_bad_command_lines(argv, message):
    with pytest.raises(UsageError, match=message):
        split_run_args(argv)


def test_an_unknown_command_gets_the_nearest_one_and_a_script_the_right_form(capsys):
    from fastmon.cli import EXIT_USAGE, main

    assert main(["reprot"]) == EXIT_USAGE
    assert "unknown command 'reprot' — did you mean `fastmon report`?" in capsys.readouterr().err
    assert main(["train.py"]) == EXIT_USAGE
    assert "a script goes after `run`: fastmon run SCRIPT ARGS" in capsys.readouterr().err


def test_every_option_of_every_command_has_a_help_line(capsys):
    from fastmon.cli import COMMANDS

    for name, command in COMMANDS.items():
        with pytest.raises(SystemExit):
            command(["--help"])
        shown = capsys.readouterr().out
        options = [line.split()[0] for line in shown.splitlines() if line.startswith("  -")]
        assert options, name
        for line in shown.split("options:")[1].splitlines():
            if line.startswith("  -") and len(line.split("  ")) < 3:  # "  --x X   help", or help on the next line
                following = shown.split(line)[1].splitlines()[1:2]
                assert following and following[0].startswith(" " * 8), f"{name} {line.strip()} has no help"


def test_a_missing_module_is_refused_before_anything_starts(tmp_path, monkeypatch):
    from fastmon.cli import UsageError, check_target

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="no module named 'no_such_module_here'.*nothing started"):
        check_target(["-m", "no_such_module_here.train"])
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    check_target(["-m", "mine.train"])  # found from the current folder, as python -m finds it
    check_target(["-m", "json.tool"])
    assert not (tmp_path / "fastmon-runs").exists()


def test_fastmon_options_after_the_script_are_named():
    from fastmon.cli import misplaced_options

    assert misplaced_options(["train.py", "--lr", "3", "--headless", "--apply=auto"]) == ["--headless", "--apply=auto"]
    assert misplaced_options(["train.py", "--epochs", "3"]) == []
