"""How a machine's chips are named, the same in the training process and the monitor."""

from __future__ import annotations

import platform


def cpu_name() -> str:
    """The CPU's model as /proc/cpuinfo names it (the probe's environment fact carries it too)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return "CPU " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU " + (platform.processor() or platform.machine())
