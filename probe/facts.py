"""Run facts: descriptions of the model, optimizer, loaders and the torch settings that
the advisor's rules need. Each is sent once and again whenever it changes."""

from __future__ import annotations

import os
import sys
import threading
import weakref

import torch

from fastmon.common.machine import cpu_name
from fastmon.probe.torch_private import profiler_running


def describe_model(module: torch.nn.Module) -> dict:
    params = list(module.parameters())
    wrapper = None
    inner = module
    if isinstance(module, torch.nn.DataParallel):
        wrapper, inner = "DataParallel", module.module
    elif isinstance(module, torch.nn.parallel.DistributedDataParallel):
        wrapper, inner = "DistributedDataParallel", module.module
    elif isinstance(getattr(module, "_orig_mod", None), torch.nn.Module):
        wrapper, inner = "torch.compile", module._orig_mod  # an OptimizedModule: the user's model inside
    modules = list(inner.modules())
    return {
        "class": type(inner).__name__,
        "wrapper": wrapper,
        "parameters": sum(p.numel() for p in params),
        "dtypes": sorted({str(p.dtype).replace("torch.", "") for p in params}),
        "devices": sorted({str(p.device) for p in params}),
        # By type, not name: transformers' Conv1D (GPT-2) is a linear layer.
        "conv": any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in modules),
        "matmul": any(isinstance(m, MATMUL_LAYERS) or _is_hf_conv1d(m) for m in modules),
        "embedding": any(isinstance(m, torch.nn.Embedding) for m in modules),  # its integer input: tokens
        "lm": language_model(inner),
        "sharding": sharding(module),
        # torch's CheckpointWrapper around blocks, or transformers' gradient checkpointing
        "activation_checkpointing": any(type(m).__name__ == "CheckpointWrapper" for m in modules)
        or bool(getattr(inner, "is_gradient_checkpointing", False)),
        "sequence_first": sequence_first(modules),
        "conv_bias_before_bn": (flagged := conv_bias_before_bn(inner)),
        # where the script built the first of them (the probe saw each conv's construction)
        "conv_bias_location": BUILT_AT.get(inner.get_submodule(flagged[0])) if flagged else None,
        "channels_last": any(p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last)
                             and not p.is_contiguous() for p in params),
    }


def sharding(module: torch.nn.Module) -> dict | None:
    """How the model is sharded: FSDP2 (``fully_shard``) or FSDP1, whether its units reshard
    after forward (FSDP2: all of them; a unit that does not is gathered once a step) and the
    mixed-precision policy's parameter dtype (None: none). None where it is not sharded, or
    where this torch's FSDP cannot be read (the model's other facts go on without it)."""
    try:
        return _sharding(module)
    except Exception:  # noqa: BLE001 - a fact lost, never the forward's timing
        return None


def _sharding(module: torch.nn.Module) -> dict | None:
    if not torch.distributed.is_available():
        return None
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:  # torch < 2.6
        try:
            from torch.distributed._composable.fsdp import FSDPModule
            from torch.distributed.fsdp import FullyShardedDataParallel
        except ImportError:
            return None
    units = [m for m in module.modules() if isinstance(m, FSDPModule)]
    if units:
        groups = [g for g in (_fsdp2_group(m) for m in units) if g is not None]
        dtypes = {str(g.mp_policy.param_dtype).removeprefix("torch.") for g in groups if g.mp_policy.param_dtype}
        return {"kind": "FSDP2", "units": len(units),
                "reshard_after_forward": all(g.post_forward_mesh_info is not None for g in groups) if groups else None,
                "param_dtype": min(dtypes) if dtypes else None}
    units = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel)]
    if units:
        policy = getattr(units[0], "mixed_precision", None)
        dtype = getattr(policy, "param_dtype", None)
        return {"kind": "FSDP1", "units": len(units), "reshard_after_forward": None,
                "param_dtype": str(dtype).removeprefix("torch.") if dtype else None}
    return None


def _fsdp2_group(unit):
    """An FSDP2 unit's parameter group (torch's private state: None where it has moved)."""
    try:
        return unit._get_fsdp_state()._fsdp_param_group
    except Exception:  # noqa: BLE001 - a torch whose internals differ: the fact goes without it
        return None


def language_model(model: torch.nn.Module) -> dict | None:
    """What the 6·N + attention estimate of FLOPs a token needs (nanoGPT's ``estimate_mfu``,
    PaLM's appendix B): N, the parameters without position embeddings (every embedding but
    the largest, the tokens'; a DTensor shard counts as the whole tensor: its numel is the
    global one), the attention layers and the width (the token embedding's dimension).
    None for a model without an embedding or without attention (an LSTM's)."""
    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    if not embeddings:
        return None
    tokens = max(embeddings, key=lambda m: m.num_embeddings)
    layers = attention_layers(model)
    if not layers:
        return None
    positions = {id(m.weight) for m in embeddings if m is not tokens}
    params = sum(p.numel() for p in model.parameters() if id(p) not in positions)
    return {"params": params, "layers": layers, "width": tokens.embedding_dim}


def attention_layers(module: torch.nn.Module) -> int:
    """The outermost attention modules under ``module``: torch's MultiheadAttention, or a class
    named ...Attention (nanoGPT's CausalSelfAttention, transformers' GPT2Attention)."""
    if isinstance(module, torch.nn.MultiheadAttention) or type(module).__name__.endswith("Attention"):
        return 1
    return sum(attention_layers(child) for child in module.children())


MATMUL_LAYERS = (torch.nn.Linear, torch.nn.Bilinear, torch.nn.MultiheadAttention, torch.nn.RNNBase,
                 torch.nn.modules.conv._ConvNd)


def _is_hf_conv1d(module) -> bool:
    weight = getattr(module, "weight", None)
    return type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor) and weight.dim() == 2


def sequence_first(modules) -> bool:
    """The model's recurrent or attention layers take (time, batch, ...): its inputs' dim 0
    is time, and the batch is dim 1 (pytorch/examples' word_language_model)."""
    layers = [m for m in modules if isinstance(m, (torch.nn.RNNBase, torch.nn.MultiheadAttention))]
    return bool(layers) and not any(getattr(m, "batch_first", False) for m in layers)


BUILT_AT: "weakref.WeakKeyDictionary[torch.nn.Module, str]" = weakref.WeakKeyDictionary()  # conv -> file:line


def conv_bias_before_bn(module: torch.nn.Module) -> list[str]:
    """Names of Conv layers with a bias whose next registered sibling is a BatchNorm."""
    found = []
    for parent_name, parent in module.named_modules():
        children = list(parent.named_children())
        for (name, child), (_, nxt) in zip(children, children[1:]):
            if (isinstance(child, torch.nn.modules.conv._ConvNd) and child.bias is not None
                    and isinstance(nxt, torch.nn.modules.batchnorm._BatchNorm)):
                found.append(f"{parent_name}.{name}" if parent_name else name)
    return found[:10]


FRAMEWORKS = (  # by the file that calls optimizer.step(); the Trainer steps through accelerate, so first
    ("transformers.Trainer", ("/transformers/trainer.py",)),
    ("lightning", ("/lightning/pytorch/", "/pytorch_lightning/")),
    ("accelerate", ("/accelerate/",)),
)


def framework(frame) -> dict:
    """What trains: found in the frames that led to the optimizer step, from ``frame`` up."""
    files = []
    while frame is not None and len(files) < 200:
        files.append(frame.f_code.co_filename.replace("\\", "/"))
        frame = frame.f_back
    for name, markers in FRAMEWORKS:
        if any(marker in f for f in files for marker in markers):
            return {"name": name}
    return {"name": "plain"}


def describe_optimizer(optimizer: torch.optim.Optimizer) -> dict:
    defaults = {k: v for k, v in optimizer.defaults.items() if isinstance(v, (int, float, bool, str, type(None)))}
    devices = sorted({str(p.device) for g in optimizer.param_groups for p in g["params"]})
    return {"class": type(optimizer).__name__, "defaults": defaults, "devices": devices,
            "groups": len(optimizer.param_groups)}


def describe_loader(loader) -> dict:
    from torch.utils.data import IterableDataset, default_collate, default_convert

    try:
        length = len(loader.dataset)
    except TypeError:
        length = None
    batch_size, epoch_samples = batch_shape(loader)
    return {
        "num_workers": loader.num_workers,
        "pin_memory": bool(loader.pin_memory),
        # The batch sampler's where the loader has none of its own (the transformers Trainer's, accelerate's)
        "batch_size": batch_size,
        "epoch_samples": epoch_samples,
        "persistent_workers": bool(loader.persistent_workers),
        "prefetch_factor": loader.prefetch_factor,
        "dataset_len": length,
        "dataset": type(loader.dataset).__name__,
        "iterable": isinstance(loader.dataset, IterableDataset),
        # a collate_fn of the script's own may do the slow work an in-memory dataset does not
        "default_collate": loader.collate_fn in (default_collate, default_convert),
        "len": _safe_len(loader),
        # whose stage times in the data pipeline are this loader's (fastmon.pipeline)
        "pipeline_key": _pipeline_key(loader.dataset),
    }


def _pipeline_key(dataset) -> str | None:
    from fastmon.probe.pipeline_stages import dataset_key

    try:
        return dataset_key(dataset)
    except Exception:  # a dataset whose attributes raise: its stages pooled with any other's
        return None


def batch_shape(loader) -> tuple[int | None, int | None]:
    """(samples in a full batch, samples in an epoch): every batch is full but maybe the
    last, so the first k batches hold min(k * batch_size, epoch_samples) samples."""
    if loader.batch_size is not None:
        batch_size, drop_last, sampler = loader.batch_size, loader.drop_last, loader.sampler
    else:
        batch_sampler = loader.batch_sampler
        batch_size = getattr(batch_sampler, "batch_size", None)
        drop_last = getattr(batch_sampler, "drop_last", None)
        sampler = getattr(batch_sampler, "sampler", None)
        if type(batch_sampler).__module__.startswith("accelerate") and getattr(batch_sampler, "batch_sampler", None):
            inner = batch_sampler.batch_sampler  # BatchSamplerShard over one process: the plain one
            sampler = getattr(inner, "sampler", None) if getattr(batch_sampler, "num_processes", 1) == 1 else None
    if not isinstance(batch_size, int) or sampler is None or drop_last is None:
        return batch_size if isinstance(batch_size, int) else None, None
    try:
        total = len(sampler)
    except TypeError:
        return batch_size, None
    return batch_size, (total // batch_size) * batch_size if drop_last else total


def _safe_len(loader):
    try:
        return len(loader)
    except TypeError:
        return None


def settings() -> dict:
    """Global torch settings that rules read; polled every few steps."""
    return {
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "anomaly_detection": bool(torch.is_anomaly_enabled()),
        "profiler_on": profiler_running(),
        "grad_enabled": torch.is_grad_enabled(),
        "threads": torch.get_num_threads(),  # torch's intra-op threads: cores its compute keeps busy
    }


def experiment_trackers() -> dict:
    """Where the script logs: its TensorBoard folders, its W&B and MLflow runs, read from
    what it imported (never imported here), for ``--log-to``: fastmon's figures go beside."""
    out = {}
    folders = tensorboard_folders()
    if folders:
        out["tensorboard"] = folders
    run = getattr(sys.modules.get("wandb"), "run", None)
    if run is not None:
        try:
            out["wandb"] = {"id": run.id, "project": run.project, "entity": run.entity, "group": run.group,
                            "name": run.name, "root_dir": run.settings.root_dir, "offline": bool(run.offline)}
        except Exception:  # a run finished or torn down while we read it
            pass
    mlflow = sys.modules.get("mlflow")
    if mlflow is not None and hasattr(mlflow, "active_run"):
        try:
            active = mlflow.active_run()
            if active is not None:
                out["mlflow"] = {"run_id": active.info.run_id, "tracking_uri": mlflow.get_tracking_uri()}
        except Exception:
            pass
    return out


def tensorboard_folders() -> list[str]:
    """The folders of the script's open TensorBoard event files. A writer opens its file
    anew for each write, so no file stays open to be seen; each writer has a thread that
    holds the file's name."""
    out = []
    for thread in threading.enumerate():
        name = getattr(getattr(getattr(thread, "_record_writer", None), "_writer", None), "filename", None)
        if isinstance(name, bytes):
            name = os.fsdecode(name)
        if isinstance(name, str) and "tfevents" in name:
            out.append(os.path.dirname(os.path.abspath(name)))
    return sorted(set(out))


def environment() -> dict:
    cuda = torch.cuda.is_available()
    env = {
        "torch": torch.__version__,
        "cuda_available": cuda,
        "cpu_count": os.cpu_count(),
        "device_count": torch.cuda.device_count() if cuda else 0,
        "accelerator": "cuda" if cuda else "cpu",
        "cpu": cpu_name(),  # what `fastmon doctor --calibrate` measured is kept under this name
        "devices": [],
    }
    if cuda:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            env["devices"].append({
                "index": index, "name": props.name, "capability": f"{props.major}.{props.minor}",
                "total_memory": props.total_memory, "multiprocessors": props.multi_processor_count,
                "bf16": props.major >= 8, "tf32": props.major >= 8,
            })
    return env
