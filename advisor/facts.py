"""Run facts as the rules see them: what the probe reported (model, optimizer, loaders,
torch settings, code-level events) and what the monitor sampled (GPU, host)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_EPOCHS_ARG = re.compile(r"^--(?:max[-_]|num[-_])?epochs?(?:=(\d+))?$")


def epochs_from_argv(argv: list[str]) -> int | None:
    """``--epochs N`` (or --max-epochs / --num-epochs) in the script's arguments, if any."""
    for i, arg in enumerate(argv):
        match = _EPOCHS_ARG.match(arg)
        if match:
            value = match.group(1) or (argv[i + 1] if i + 1 < len(argv) else "")
            if value.isdigit():
                return int(value)
    return None


@dataclass
class Facts:
    values: dict = field(default_factory=dict)  # fact key -> latest value, as the probe sent it
    events: list = field(default_factory=list)  # probe events: {"kind", "location", ...}
    gpu: list = field(default_factory=list)  # recent NVML samples: one list of per-device dicts each
    host_cpu_count: int = 1
    # cores busy on average over the window: {"trainer", "workers", "others"} (None: not sampled)
    host_cpu: dict | None = None
    ranks: int = 1

    def _prefixed(self, prefix: str) -> list[dict]:
        return [v for k, v in sorted(self.values.items()) if k.startswith(prefix) and isinstance(v, dict)]

    @property
    def environment(self) -> dict:
        return self.values.get("environment") or {}

    @property
    def settings(self) -> dict:
        return self.values.get("settings") or {}

    @property
    def loaders(self) -> list[dict]:
        return self._prefixed("loader.")

    @property
    def models(self) -> list[dict]:
        return self._prefixed("model.")

    @property
    def optimizers(self) -> list[dict]:
        return self._prefixed("optimizer.")

    @property
    def accelerator(self) -> bool:
        return bool(self.environment.get("cuda_available"))

    @property
    def device(self) -> dict:
        devices = self.environment.get("devices") or []
        return devices[0] if devices else {}

    @property
    def autocast(self) -> bool:
        return bool((self.values.get("amp.autocast") or {}).get("enabled"))

    @property
    def models_on_accelerator(self) -> bool:
        return any(any(d.startswith("cuda") for d in m.get("devices", [])) for m in self.models)

    def training_loader(self) -> dict | None:
        """The loader the training loop iterates most (its epochs are the training epochs);
        of equals, the newest (a script that builds one for each epoch trains on the last)."""
        loaders = self.loaders
        return max(loaders, key=lambda x: (x.get("epochs", 0), x.get("len") or 0, loader_number(x))) if loaders \
            else None

    @property
    def epochs_asked(self) -> int | None:
        """The epochs the script's command line asks for (``--epochs N``), if it says."""
        return epochs_from_argv(list(self.values.get("script_argv") or ()))

    def event(self, kind: str) -> dict | None:
        for event in self.events:
            if event.get("kind") == kind:
                return event
        return None

    def all_events(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("kind") == kind]

    def gpu_mean(self, key: str) -> float | None:
        values = [d[key] for sample in self.gpu for d in sample if d.get(key) is not None and d.get("our_process", True)]
        return sum(values) / len(values) if values else None

    def gpus_used(self) -> int:
        if not self.gpu:
            return 0
        return sum(1 for d in self.gpu[-1] if d.get("our_process"))


def loader_number(loader: dict) -> int:
    """The order the probe saw the loader in: L0, L1, ..."""
    name = str(loader.get("id") or "")
    return int(name[1:]) if name[1:].isdigit() else -1

