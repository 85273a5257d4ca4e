"""dataparallel: ``nn.DataParallel`` is used for multi-GPU training.

What it detects: a model wrapped in ``torch.nn.DataParallel``.
Why it matters: DataParallel runs one Python process that scatters inputs, replicates
the model every step and gathers outputs on GPU 0: GIL-bound, unbalanced, and slower
than DistributedDataParallel even on one node.
How to fix: DistributedDataParallel, one process per GPU, launched by torchrun — with
fastmon: ``fastmon run --nproc-per-node N train.py``.
"""

from fastmon.advisor.types import CODE_CHANGE, Advice

ID = "dataparallel"


def check(window, facts):
    model = next((m for m in facts.models if m.get("wrapper") == "DataParallel"), None)
    if model is None:
        return None
    gpus = max(facts.environment.get("device_count", 0), 2)
    return Advice(
        ID, "Use DistributedDataParallel instead of DataParallel",
        f"{model.get('class')} is wrapped in nn.DataParallel over {gpus} GPUs; "
        f"median step {window.step_median * 1e3:.1f} ms", None, CODE_CHANGE,
        fix=f"model = DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])\n"
            f"# then: fastmon run --nproc-per-node {gpus} {facts.values.get('script', 'train.py')} ...",
        why="one process replicates the model every step and gathers on GPU 0",
    )
