"""Run facts: descriptions of the model, optimizer, loaders and the torch settings that
the advisor's rules need. Each is sent once and again whenever it changes."""

from __future__ import annotations

import os

import torch


def describe_model(module: torch.nn.Module) -> dict:
    params = list(module.parameters())
    wrapper = None
    inner = module
    if isinstance(module, torch.nn.DataParallel):
        wrapper, inner = "DataParallel", module.module
    elif isinstance(module, torch.nn.parallel.DistributedDataParallel):
        wrapper, inner = "DistributedDataParallel", module.module
    kinds = {type(m).__name__ for m in inner.modules()}
    return {
        "class": type(inner).__name__,
        "wrapper": wrapper,
        "parameters": sum(p.numel() for p in params),
        "dtypes": sorted({str(p.dtype).replace("torch.", "") for p in params}),
        "devices": sorted({str(p.device) for p in params}),
        "conv": any(k.startswith("Conv") for k in kinds),
        "matmul": any(k in ("Linear", "Bilinear", "MultiheadAttention", "TransformerEncoderLayer",
                            "TransformerDecoderLayer", "LSTM", "GRU") or k.startswith("Conv")
                      for k in kinds),
        "conv_bias_before_bn": conv_bias_before_bn(inner),
        "channels_last": any(p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last)
                             and not p.is_contiguous() for p in params),
    }


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


def describe_optimizer(optimizer: torch.optim.Optimizer) -> dict:
    defaults = {k: v for k, v in optimizer.defaults.items() if isinstance(v, (int, float, bool, str, type(None)))}
    devices = sorted({str(p.device) for g in optimizer.param_groups for p in g["params"]})
    return {"class": type(optimizer).__name__, "defaults": defaults, "devices": devices,
            "groups": len(optimizer.param_groups)}


def describe_loader(loader) -> dict:
    from torch.utils.data import IterableDataset

    try:
        length = len(loader.dataset)
    except TypeError:
        length = None
    return {
        "num_workers": loader.num_workers,
        "pin_memory": bool(loader.pin_memory),
        "batch_size": loader.batch_size,
        "persistent_workers": bool(loader.persistent_workers),
        "prefetch_factor": loader.prefetch_factor,
        "dataset_len": length,
        "dataset": type(loader.dataset).__name__,
        "iterable": isinstance(loader.dataset, IterableDataset),
        "len": _safe_len(loader),
    }


def _safe_len(loader):
    try:
        return len(loader)
    except TypeError:
        return None


def settings() -> dict:
    """Global torch settings that rules read; polled every few steps."""
    from torch.autograd import profiler as autograd_profiler

    return {
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "anomaly_detection": bool(torch.is_anomaly_enabled()),
        "profiler_on": bool(autograd_profiler._is_profiler_enabled),
        "grad_enabled": torch.is_grad_enabled(),
    }


def environment() -> dict:
    cuda = torch.cuda.is_available()
    env = {
        "torch": torch.__version__,
        "cuda_available": cuda,
        "cpu_count": os.cpu_count(),
        "device_count": torch.cuda.device_count() if cuda else 0,
        "accelerator": "cuda" if cuda else "cpu",
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
