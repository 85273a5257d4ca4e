"""The ``fastmon`` command line: run, demo, report, replay, export, doctor."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sqlite3
import sys
import traceback
import zipfile
from pathlib import Path

from fastmon import __version__
from fastmon.records import DEFAULT_RUNS_DIR, check_can_record

EXIT_USAGE = 2  # bad command line, missing script, syntax error (as python uses 2)
EXIT_NOT_COMPARABLE = 3  # the CI guard was asked to judge runs of different work
EXIT_SLOWER = 4  # the CI guard found the new run slower beyond noise and beyond its limit
EXIT_NOT_WRITTEN = 5  # report --patch could write none of the changes asked for (each said why)
EXIT_MACHINE_DIFFERED = 6  # the CI guard would fail, but B's step moved as a whole on a busier machine
EXIT_NO_SERVICE = 69  # watch --web cannot serve: textual-serve missing, or the port taken (EX_UNAVAILABLE)
EXIT_NO_RUN = 66  # the run folder asked for does not exist (EX_NOINPUT)
EXIT_BAD_RUN = 65  # its record cannot be read: not fastmon's, or damaged (EX_DATAERR)
EXIT_NOT_YOURS = 77  # the run folder is another user's: its owner's alone to read (EX_NOPERM)
EXIT_CANT_RECORD = 73  # the runs folder (or an export's file) cannot be made or written to (EX_CANTCREAT)

# torchrun's options that say how to start the script: fastmon starts it, through its probe
TORCHRUN_REFUSED = {"-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path", "-h", "--help"}


class UsageError(Exception):
    pass


def option_values(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """Each option of ``parser`` and whether it takes a value."""
    return {name: action.nargs != 0 for action in parser._actions for name in action.option_strings}


def torchrun_options() -> dict[str, bool]:
    """Every option of the installed torchrun, from its own parser (torch is imported only
    when an option is not fastmon's)."""
    from torch.distributed.run import get_args_parser

    return {name: takes for name, takes in option_values(get_args_parser()).items() if name not in TORCHRUN_REFUSED}


def split_run_args(argv: list[str]):
    """fastmon's and torchrun's options come first; then SCRIPT or -m MODULE; the rest is the script's."""
    own_options, torchrun_known = option_values(run_parser()), None
    own, torchrun, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name")
            return own, torchrun, ["-m", *argv[i + 1:]]
        if not arg.startswith("-"):
            return own, torchrun, argv[i:]
        name, equals, value = arg.partition("=")
        if name.startswith("--"):
            name = name.replace("_", "-")  # torchrun accepts --nproc_per_node too
        if name in own_options:
            dest, takes_value = own, own_options[name]
        else:
            torchrun_known = torchrun_known if torchrun_known is not None else torchrun_options()
            if name in TORCHRUN_REFUSED:
                raise UsageError(f"{arg}: fastmon starts the script itself: give SCRIPT or -m MODULE after the options")
            if name not in torchrun_known:
                raise UsageError(f"unknown option {arg!r} (fastmon's options go before the script)")
            dest, takes_value = torchrun, torchrun_known[name]
        dest.append(name + equals + value)
        if takes_value and not equals:
            if i + 1 >= len(argv):
                raise UsageError(f"{arg} needs a value")
            dest.append(argv[i + 1])
            i += 1
        i += 1
    return own, torchrun, []


def run_parser() -> argparse.ArgumentParser:
    from fastmon.headless import STATUS_EVERY
    from fastmon.loggers import METRICS_PORT
    from fastmon.session import PROFILE_STEPS

    parser = argparse.ArgumentParser(
        prog="fastmon run", description="Run a training script under fastmon, like `python SCRIPT ARGS`. "
                                        "torchrun's options (torch.distributed.run --help) pass through to torchrun.",
        parents=[runs_dir_option()],
        usage="fastmon run [--headless [--status-every SECONDS]] [--web [--web-port N]] [--apply ask|auto|never] [--allow IDS] [--runs-dir DIR] "
              "[--every-step] [--tokens-per-sample N] [--exit-on-finish] [--profile-at STEP [--profile-steps N]] "
              "[--baseline RUN [--fail-if-slower PCT]] [--log-to TRACKERS] [--job-port PORT [--job-addr ADDR]] [torchrun options] "
              "(SCRIPT | -m MODULE) [ARGS...]")
    parser.add_argument("--headless", action="store_true", help="no dashboard: output passes through, "
                        "a status line every few seconds on stderr, a summary at the end")
    parser.add_argument("--status-every", type=seconds, default=STATUS_EVERY, metavar="SECONDS",
                        help=f"headless: seconds between two status lines (default {STATUS_EVERY:g})")
    parser.add_argument("--web", action="store_true",
                        help="headless, and the dashboard served to a browser behind a token (fastmon watch --web)")
    parser.add_argument("--web-port", type=port_number, default=None, metavar="N",
                        help="--web: the port (default 8000)")
    parser.add_argument("--apply", choices=("ask", "auto", "never"), default=None,
                        help="hot-apply: ask (dashboard default), auto (safe changes only), never (headless default)")
    parser.add_argument("--allow", default="", help="comma-separated advice ids that auto may apply although "
                        "they change the maths of training (amp, tf32)")
    parser.add_argument("--allow-batch-change", action="store_true",
                        help="let --apply auto try a larger batch (with the LR scaled); it changes the training")
    parser.add_argument("--every-step", action="store_true",
                        help="time the phases of every step; by default steps shorter than ~50 ms are timed "
                             "in a random sample, which keeps the probe's cost under ~10 µs a step")
    parser.add_argument("--exit-on-finish", action="store_true", help="close the dashboard when the script ends")
    parser.add_argument("--tokens-per-sample", type=whole_number(1), metavar="N",
                        help="a language model whose forward takes no `input_ids` and no integer ids first: its "
                             "tokens are N a sample (fastmon counts them itself where it finds the ids)")
    parser.add_argument("--profile-at", type=whole_number(0), metavar="STEP",
                        help="capture steps from STEP on with torch.profiler: a trace in the run folder, the top "
                             "operators and torch's anti-pattern findings (the dashboard's t key does it now)")
    parser.add_argument("--profile-steps", type=whole_number(1), default=PROFILE_STEPS, metavar="N",
                        help=f"how many steps a torch.profiler capture covers (default {PROFILE_STEPS})")
    parser.add_argument("--log-to", type=trackers, default=[], metavar="TRACKERS",
                        help="send fastmon's step figures to tensorboard, wandb and/or mlflow (comma-separated): "
                             "into the script's own runs where it has them; prometheus serves them at /metrics")
    parser.add_argument("--metrics-port", type=whole_number(0, 65535), default=METRICS_PORT, metavar="PORT",
                        help=f"with --log-to prometheus: the port of /metrics (default {METRICS_PORT}; "
                             "0 or a port taken: a free one, said at the start)")
    parser.add_argument("--job-port", type=whole_number(1, 65535), metavar="PORT",
                        help="a job of several nodes (torchrun's --nnodes): where node 0's monitor gathers the "
                             "other nodes' ranks live (default: torchrun's master port + 1; the same on every "
                             "node); the job's secret comes from FASTMON_JOB_SECRET or FASTMON_JOB_SECRET_FILE")
    parser.add_argument("--job-addr", metavar="ADDR",
                        help="the address node 0's job port listens on (default: the master address where it is "
                             "this host's own and not loopback, else every interface; said at the start)")
    parser.add_argument("--baseline", metavar="RUN", help="a recorded run of the same work: at the end, this run "
                        "is compared with it (fastmon compare RUN NEW)")
    parser.add_argument("--fail-if-slower", type=percent, metavar="PCT",
                        help=f"with --baseline: exit {EXIT_SLOWER} when this run is slower beyond noise and by more "
                             f"than PCT%%, {EXIT_NOT_COMPARABLE} when the two runs trained different work, "
                             f"{EXIT_MACHINE_DIFFERED} when the difference is within what a busier machine explains")
    return parser


def trackers(text: str) -> list[str]:
    from fastmon.loggers import parse_log_to

    try:
        return parse_log_to(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage from 0 to 1000 (5 for 5%)")
    return value


def runs_dir_option() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--runs-dir", default=os.environ.get("FASTMON_RUNS_DIR", DEFAULT_RUNS_DIR),
                        help=f"where run folders are (default ./{DEFAULT_RUNS_DIR}, or $FASTMON_RUNS_DIR)")
    return parent


def whole_number(least: int, most: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least or (most is not None and value > most):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from {least}"
                                             + (f" to {most}" if most is not None else ""))
        return value
    return parse


def check_target(target: list[str]) -> None:
    if not target:
        raise UsageError("no script given: fastmon run [options] SCRIPT [ARGS...]")
    if target[0] == "-m":
        if not module_exists(target[1]):
            raise UsageError(f"no module named {target[1].split('.')[0]!r} (from {os.getcwd()} and "
                             "the installed packages); nothing started")
        return
    script = Path(target[0])
    if zipfile.is_zipfile(script):
        return  # python runs a zip's __main__.py; runpy reports a zip without one
    if script.is_dir():  # as python runs a folder: its __main__.py
        if not (script / "__main__.py").is_file():
            raise UsageError(f"can't find '__main__' module in {str(script)!r}")
        script = script / "__main__.py"
    if not script.is_file():
        raise UsageError(f"can't open file {str(script)!r}: no such file")
    try:
        compile(script.read_bytes(), str(script), "exec")
    except SyntaxError as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        raise UsageError(f"{script} has a syntax error, not started:\n{detail}") from None
    except ValueError as exc:
        raise UsageError(f"{script} cannot be compiled: {exc}") from None


def module_exists(name: str) -> bool:
    """Whether ``python -m name`` would find its top-level package, looked up as python
    would from here (the current folder first), without importing it."""
    from importlib.machinery import PathFinder

    top = name.split(".")[0]
    return top in sys.builtin_module_names or PathFinder.find_spec(top, [os.getcwd(), *sys.path[1:]]) is not None


def misplaced_options(target: list[str]) -> list[str]:
    """fastmon's own options that came after the script, so went to it."""
    own = {name for name in option_values(run_parser()) if name.startswith("--")} - {"--help"}
    return [arg for arg in target[1:] if arg.partition("=")[0] in own]


def cmd_run(argv: list[str]) -> int:
    own, torchrun, target = split_run_args(argv)
    parser = run_parser()
    args = parser.parse_args(own)
    if args.fail_if_slower is not None and not args.baseline:
        parser.error("--fail-if-slower needs --baseline RUN")
    check_target(target)
    if args.baseline:  # checked before the training, which could take hours
        from fastmon.records import resolve_run

        try:
            baseline = resolve_run(args.baseline, args.runs_dir)
        except FileNotFoundError as exc:
            sys.stderr.write(f"fastmon: {exc}; nothing started\n")
            return EXIT_NO_RUN
    try:  # before anything starts: a training whose record cannot be written is not run
        check_can_record(args.runs_dir)
    except OSError as exc:
        sys.stderr.write(f"fastmon: cannot record in {args.runs_dir!r}: {exc.strerror or exc}; nothing started "
                         "(--runs-dir or $FASTMON_RUNS_DIR names another folder)\n")
        return EXIT_CANT_RECORD
    from fastmon.session import RunOptions

    if torchrun and not any(o.startswith(("--nnodes", "--rdzv", "--master", "--standalone")) for o in torchrun):
        # One node and no rendezvous given: torchrun's --standalone picks a free port, so
        # two runs on one machine do not collide on 29500.
        torchrun.append("--standalone")
    if args.web_port is not None and not args.web:
        parser.error("--web-port is an option of --web")
    if args.web:  # before the training starts: a view that cannot be served is said first, nothing started
        from fastmon.web_view import DEFAULT_PORT, NoWebServer, check_can_serve

        try:
            check_can_serve("localhost", args.web_port or DEFAULT_PORT, "--web-port")
        except NoWebServer as exc:
            sys.stderr.write(f"fastmon: --web: {exc}; nothing started\n")
            return EXIT_NO_SERVICE
    headless = args.headless or args.web or not sys.stderr.isatty()
    if headless and not (args.headless or args.web):
        # The dashboard draws on the terminal behind stderr: piped or in CI, there is none.
        sys.stderr.write("[fastmon] no terminal for the dashboard: running headless\n")
    apply = args.apply or ("never" if headless else "ask")
    if args.log_to:
        from fastmon.loggers import missing_packages

        for line in missing_packages(args.log_to):  # a note, not an error: the training is what matters
            sys.stderr.write(f"[fastmon] {line}\n")
    options = RunOptions(target=target, apply=apply,
                         allow=frozenset(filter(None, args.allow.split(","))) | (
                             {"batch_size"} if args.allow_batch_change else set()), runs_dir=args.runs_dir,
                         torchrun=torchrun or None, every_step=args.every_step, profile_at=args.profile_at,
                         profile_steps=args.profile_steps, log_to=tuple(args.log_to), metrics_port=args.metrics_port,
                         job_port=args.job_port, job_addr=args.job_addr,
                         tokens_per_sample=args.tokens_per_sample)
    if headless:
        from fastmon.headless import run_headless

        code, run_dir = run_headless(options, args.status_every, web_port=args.web_port if args.web else False)
    else:
        from fastmon.tui.launch import run_dashboard

        code, run_dir = run_dashboard(options, exit_on_finish=args.exit_on_finish)
    misplaced = misplaced_options(target) if code else []
    if misplaced:
        sys.stderr.write(f"fastmon: {' '.join(misplaced)} came after the script, so the script got "
                         f"{'it' if len(misplaced) == 1 else 'them'}: fastmon's options go before SCRIPT "
                         f"(fastmon run {' '.join(misplaced)} SCRIPT ARGS)\n")
    if not args.baseline:
        return code
    guard = with_runs([str(baseline), str(run_dir)], args.runs_dir,
                      lambda run_dirs: judge_runs(run_dirs, args.fail_if_slower, as_json=False, out=sys.stderr))
    return code or guard  # a training that failed says so first


def cmd_demo(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fastmon demo", parents=[runs_dir_option()],
                                     description="A starved training run, and fastmon fixing it live.")
    parser.add_argument("--headless", action="store_true", help="no dashboard: status lines and the summary")
    parser.add_argument("--apply", choices=("ask", "auto", "never"), default="auto",
                        help="auto (default): fastmon fixes the run itself; ask: you press a; never: advice only")
    # enough epochs for both fixes to be measured: more workers, then (over whole epochs)
    # persistent workers; a fast epoch takes ~1-1.5 s here. 10 left persistent workers
    # unmeasured when the worker search ran past an epoch's start (a CI run: tried from
    # step 1312 of 2000, the run ended first)
    parser.add_argument("--epochs", type=int, default=12, help="the demo's epochs (default 12)")
    parser.add_argument("--exit-on-finish", action="store_true", help="close the dashboard when the demo ends")
    args = parser.parse_args(argv)
    from fastmon.examples import starved

    run = [*(["--headless"] if args.headless else []), *(["--exit-on-finish"] if args.exit_on_finish else []),
           "--apply", args.apply, "--runs-dir", args.runs_dir, starved.__file__, "--epochs", str(args.epochs)]
    return cmd_run(run)


def with_runs(specs: list[str], runs_dir: str, use) -> int:
    """``use(run_dirs)``'s exit code for the run folders ``specs`` name (a folder, or
    ``latest``): 66 where one is missing, 65 where its record cannot be read, 77 where it
    is another user's."""
    from fastmon.records import RECORD_FILE, NewerRecord, resolve_run

    try:
        run_dirs = [resolve_run(spec, runs_dir) for spec in specs]
    except FileNotFoundError as exc:
        sys.stderr.write(f"fastmon: {exc}\n")
        return EXIT_NO_RUN
    except PermissionError as exc:
        return not_yours(exc, specs)
    try:
        return use(run_dirs)
    except PermissionError as exc:
        return not_yours(exc, specs)
    except sqlite3.DatabaseError as exc:
        where = ", ".join(str(Path(run) / RECORD_FILE) for run in run_dirs)
        why = "" if isinstance(exc, NewerRecord) else " (not a fastmon record, or a damaged one)"
        sys.stderr.write(f"fastmon: cannot read {where}: {exc}{why}\n")
        return EXIT_BAD_RUN


def not_yours(exc: PermissionError, specs: list[str]) -> int:
    sys.stderr.write(f"fastmon: cannot read {exc.filename or ', '.join(specs)}: permission denied (a run folder is "
                     "readable by the user who recorded it alone)\n")
    return EXIT_NOT_YOURS


def cmd_report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fastmon report", parents=[runs_dir_option()],
                                     description="Summarise a recorded run.")
    parser.add_argument("run", nargs="*", default=["latest"],
                        help="a run folder, or 'latest' (default); several folders (one per node) are merged")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--json", action="store_true", help="one JSON object, for machines")
    how.add_argument("--patch", action="store_true",
                     help="the changes fastmon measured faster, written into your script as a unified diff "
                          "(fastmon report --patch | git apply)")
    args = parser.parse_args(argv)
    from fastmon.report import format_text
    from fastmon.summary import summarize

    def report(run_dirs) -> int:
        summary = summarize(run_dirs)
        if args.patch:
            from fastmon.permanent import patch

            started_in = summary.get("cwd")  # where the run's script paths start from
            diff, skipped = patch(summary["permanent"], Path.cwd(), Path(started_in) if started_in else None)
            sys.stdout.write(diff)
            for line in skipped:
                sys.stderr.write(f"fastmon: not in the patch: {line}\n")
            if not diff and not skipped:
                sys.stderr.write("fastmon: nothing to make permanent: no change was measured faster\n")
            return EXIT_NOT_WRITTEN if skipped and not diff else 0
        print(json.dumps(summary, indent=1) if args.json else format_text(summary))
        return 0

    return with_runs(args.run, args.runs_dir, report)


def judge_runs(run_dirs, fail_if_slower: float | None, as_json: bool, out) -> int:
    """Compare run B (``run_dirs[1]``) with A, print it, and the guard's exit code."""
    from fastmon.compare import compare, format_text, guard_failed, not_judged_for_the_machine, phase_regressions

    result = compare(*run_dirs)
    out.write((json.dumps(result, indent=1) if as_json else format_text(result)) + "\n")
    if fail_if_slower is None:
        return 0
    if result["workload_differs"]:
        if not as_json:
            out.write(f"fastmon: not judged: the runs trained different work (exit {EXIT_NOT_COMPARABLE})\n")
        return EXIT_NOT_COMPARABLE
    if guard_failed(result, fail_if_slower) and not_judged_for_the_machine(result):
        if not as_json:
            out.write(f"fastmon: not judged: the machines differed (exit {EXIT_MACHINE_DIFFERED})\n")
        return EXIT_MACHINE_DIFFERED
    if guard_failed(result, fail_if_slower):
        if not as_json:
            grown = phase_regressions(result, fail_if_slower)
            named = f": {', '.join(c['phase'] for c in grown)} grew by more than that" if grown else ""
            out.write(f"fastmon: slower than the baseline by more than {fail_if_slower:g}%{named} (exit {EXIT_SLOWER})\n")
        return EXIT_SLOWER
    return 0


def cmd_compare(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fastmon compare", parents=[runs_dir_option()],
        description="Two recorded runs side by side, and whether B is faster or slower than A beyond noise.")
    parser.add_argument("a", metavar="A", help="the baseline: a run folder, or 'latest'")
    parser.add_argument("b", metavar="B", help="the run to judge against it")
    parser.add_argument("--json", action="store_true", help="one JSON object, for machines")
    parser.add_argument("--fail-if-slower", type=percent, metavar="PCT",
                        help=f"a CI guard: exit {EXIT_SLOWER} when B is slower than A beyond noise and by more "
                             f"than PCT%%, {EXIT_NOT_COMPARABLE} when they trained different work, {EXIT_MACHINE_DIFFERED} when "
                             "the difference is within what a busier machine explains")
    args = parser.parse_args(argv)
    return with_runs([args.a, args.b], args.runs_dir,
                     lambda run_dirs: judge_runs(run_dirs, args.fail_if_slower, args.json, sys.stdout))


def cmd_export(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fastmon export", parents=[runs_dir_option()],
        description="Write a recorded run as a Chrome trace, for Perfetto or chrome://tracing.")
    parser.add_argument("run", nargs="*", default=["latest"],
                        help="a run folder, or 'latest' (default); several folders (one per node) make one trace")
    parser.add_argument("-o", "--out", help="the trace file (default RUN/trace.json, in the first RUN of several; "
                                            "a .gz name is gzipped)")
    args = parser.parse_args(argv)
    from fastmon.trace_export import export

    def write_trace(run_dirs) -> int:
        try:
            out, steps = export(run_dirs, Path(args.out) if args.out else None)
        except OSError as exc:
            sys.stderr.write(f"fastmon: cannot write {exc.filename or args.out}: {exc.strerror or exc}\n")
            return EXIT_CANT_RECORD
        print(f"wrote {out} ({steps:,} steps): open it in https://ui.perfetto.dev or chrome://tracing")
        return 0

    return with_runs(args.run, args.runs_dir, write_trace)


def cmd_replay(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fastmon replay", parents=[runs_dir_option()],
                                     description="Open a recorded run in the dashboard.")
    parser.add_argument("run", nargs="?", default="latest", help="a run folder, or 'latest' (default)")
    args = parser.parse_args(argv)
    from fastmon.tui.launch import run_replay

    # The record is read whole before the dashboard starts: a bad one never reaches it.
    return with_runs([args.run], args.runs_dir, lambda run_dirs: run_replay(run_dirs[0]))


def cmd_watch(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fastmon watch", parents=[runs_dir_option()],
                                     description="Open the live dashboard of a run fastmon records headless or by "
                                                 "fastmon.attach() (from another terminal); quitting it leaves the "
                                                 "run alone. A run that has ended opens as its replay.")
    parser.add_argument("run", nargs="?", default="latest", help="a run folder, or 'latest' (default)")
    parser.add_argument("--web", action="store_true",
                        help="serve the dashboard to a browser instead (textual-serve), behind a token")
    parser.add_argument("--host", default="localhost", help="--web: the address to listen on (default localhost)")
    parser.add_argument("--port", type=port_number, default=None, help="--web: the port (default 8000)")
    args = parser.parse_args(argv)
    if not args.web and (args.port is not None or args.host != "localhost"):
        raise UsageError("--host and --port are options of --web")
    if args.web:
        return with_runs([args.run], args.runs_dir, lambda run_dirs: serve_web(run_dirs[0], args))
    from fastmon.tui.launch import run_watch

    return with_runs([args.run], args.runs_dir, lambda run_dirs: run_watch(run_dirs[0]))


def serve_web(run_dir: Path, args) -> int:
    from fastmon.web_view import DEFAULT_PORT, NoWebServer, serve

    port = DEFAULT_PORT if args.port is None else args.port
    try:
        serve(run_dir.resolve(), str(Path(args.runs_dir).resolve()), args.host, port,
              lambda line: print(line, file=sys.stderr, flush=True))
    except NoWebServer as exc:
        sys.stderr.write(f"fastmon: {exc}\n")
        return EXIT_NO_SERVICE
    return 0


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1 to 65535)")
    return port


def cmd_doctor(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fastmon doctor", description="What fastmon can measure on this machine.")
    parser.add_argument("--calibrate", action="store_true",
                        help="measure what each chip reaches in large matrix products (a few seconds), kept in "
                             "~/.cache/fastmon: reports then read a run's FLOP rate against it")
    args = parser.parse_args(argv)
    from fastmon.doctor import calibration_lines, report

    print(report())
    if args.calibrate:
        print("\n".join(calibration_lines()))
    return 0


COMMANDS = {"run": cmd_run, "demo": cmd_demo, "report": cmd_report, "compare": cmd_compare, "replay": cmd_replay,
            "watch": cmd_watch, "export": cmd_export, "doctor": cmd_doctor}

USAGE = """usage: fastmon COMMAND ...

  run [options] SCRIPT [ARGS...]   run a training script, watched (like `python SCRIPT ARGS`)
  run [options] -m MODULE [ARGS...]
  demo                             a starved run, and the advisor fixing it live
  report [RUN] [--json|--patch]    summarise a recorded run (default: latest); --patch: its
                                   kept changes written into your script, for `git apply`
  compare A B [--fail-if-slower PCT]
                                   two runs side by side: is B slower than A beyond noise?
  replay [RUN]                     open a recorded run in the dashboard
  watch [RUN] [--web]              the live dashboard of a headless or attached run, from another
                                   terminal (--web: in a browser)
  export [RUN] [-o FILE]           write it as a trace for Perfetto or chrome://tracing
  doctor [--calibrate]             what fastmon can measure on this machine (and what its chips reach)

`fastmon run --help` lists the run options.
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if argv else EXIT_USAGE
    if argv[0] == "--version":
        print(f"fastmon {__version__}")
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        close = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        hint = f" — did you mean `fastmon {close[0]}`?" if close else ""
        script = " (a script goes after `run`: fastmon run SCRIPT ARGS)" if argv[0].endswith(".py") else ""
        sys.stderr.write(f"fastmon: unknown command {argv[0]!r}{hint}{script}\n{USAGE}")
        return EXIT_USAGE
    try:
        code = command(argv[1:])
        sys.stdout.flush()  # here, where a reader gone is caught, not at the interpreter's exit
        return code
    except UsageError as exc:
        sys.stderr.write(f"fastmon: {exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:
        # `fastmon report | head -1`: the reader has what it wanted. Nothing more goes to the
        # closed pipe, not even at exit (python's advice for SIGPIPE's default behaviour).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0


def entry() -> None:
    sys.exit(main())
