"""The knob a user turns for a setting, in the framework the script trains with: the
transformers Trainer takes its loader's settings from ``TrainingArguments``; Lightning,
accelerate and plain loops from the ``DataLoader`` the script builds."""

from __future__ import annotations

TRAINER = "transformers.Trainer"
LIGHTNING = "lightning"
ACCELERATE = "accelerate"
PLAIN = "plain"

# DataLoader argument -> TrainingArguments field
TRAINING_ARGUMENTS = {"num_workers": "dataloader_num_workers", "pin_memory": "dataloader_pin_memory",
                      "persistent_workers": "dataloader_persistent_workers",
                      "prefetch_factor": "dataloader_prefetch_factor"}


def framework(facts) -> str:
    return (facts.values.get("framework") or {}).get("name") or PLAIN


def loader_setting(facts, **params) -> str:
    """The line that sets these DataLoader arguments for good."""
    if framework(facts) == TRAINER and all(k in TRAINING_ARGUMENTS for k in params):
        return "TrainingArguments(..., " + ", ".join(f"{TRAINING_ARGUMENTS[k]}={v}" for k, v in params.items()) + ")"
    where = " in train_dataloader()" if framework(facts) == LIGHTNING else ""
    return "DataLoader(..., " + ", ".join(f"{k}={v}" for k, v in params.items()) + ")" + where


def batch_setting(facts, batch: int | None, factor: float) -> str:
    new = int(batch * factor) if batch else None
    if framework(facts) == TRAINER:
        return f"TrainingArguments(..., per_device_train_batch_size={new or f'x{factor:g}'})"
    if framework(facts) == PLAIN and facts.training_loader() is None:  # batches the script makes itself
        return f"the script's own batch size x{factor:g}" + (f" ({batch} → {new} samples a step)" if batch else "")
    where = " in train_dataloader()" if framework(facts) == LIGHTNING else ""
    return f"DataLoader(..., batch_size={new or f'x{factor:g}'}){where}"
