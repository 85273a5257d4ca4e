"""How long a printing script's writes stall while output.log's disk takes no writes
(as under `fsfreeze --freeze`, which needs root and a real file system: here every write
call into output.log waits until the end, in this process), against the same prints with
the disk taking them.

    python benchmarks/blocked_output_log.py     # prints the table (results: blocked_output_log.md)
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

from fastmon.script_output import ScriptOutput

HERE = Path(__file__).resolve().parent
LINES, LINE = 20_000, b"x" * 199 + b"\n"


def stalls(frozen: bool) -> list[float]:
    thawed = threading.Event()
    real = {name: getattr(os, name) for name in ("write", "pwrite", "splice")}

    def wrap(call):
        def maybe_wait(fd, *args, **kwargs):
            if frozen and isinstance(fd, int) and os.readlink(f"/proc/self/fd/{fd}").endswith("output.log"):
                thawed.wait(120)
            return call(fd, *args, **kwargs)
        return maybe_wait

    with tempfile.TemporaryDirectory() as folder:
        for name, call in real.items():
            setattr(os, name, wrap(call))
        try:
            output = ScriptOutput(Path(folder), lambda *_: None, lambda stream: None, passthrough=False)
            read, write = os.pipe()
            output.start({"stdout": read})
            took = []
            for _ in range(LINES):
                start = time.perf_counter()
                real["write"](write, LINE)
                took.append(time.perf_counter() - start)
            thawed.set()
            os.close(write)
            output.wait_after_exit()
            output.close()
        finally:
            for name, call in real.items():
                setattr(os, name, call)
    return took


def main() -> None:
    rows = []
    for frozen in (False, True, False, True):
        took = sorted(stalls(frozen))
        rows.append(f"| {'frozen' if frozen else 'writable'} | {LINES:,} lines of 200 B | "
                    f"{took[len(took) // 2] * 1e6:.1f} µs | {took[int(len(took) * 0.999)] * 1e3:.2f} ms | "
                    f"{took[-1] * 1e3:.1f} ms | {sum(took):.2f} s |")
    text = "\n".join(["# A printing script's writes while output.log's disk is frozen", "",
                      "`python benchmarks/blocked_output_log.py`: each `os.write` of the script timed; "
                      "frozen = every write call into output.log waits until the script is done.", "",
                      "| output.log | prints | median write | p99.9 | longest | all |", "|---|---|---|---|---|---|",
                      *rows]) + "\n"
    (HERE / "results" / "blocked_output_log.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
