"""One module per rule; each has ``ID``, named thresholds, ``check(window, facts)`` and a
docstring saying what it detects, why it matters and how to fix it. A rule whose advice
can be applied live says in its ``Apply`` whether that changes the maths (then only the
user's accept applies it) and, but for the DataLoader's (merged into one call), has
``permanent(params, facts)``: the line that keeps the change after fastmon."""

from fastmon.advisor.rules import (
    amp,
    autograd_detect_anomaly,
    batch_size,
    channels_last,
    compile_recompiles,
    conv_bias_before_bn,
    cudnn_benchmark,
    data_slow_stage,
    dataloader_num_workers,
    dataloader_persistent_workers,
    dataloader_pin_memory,
    dataloader_prefetch_factor,
    dataparallel,
    grad_clipping,
    lr_schedule,
    memory_pressure,
    multi_gpu_unused,
    optimizer_adamw,
    optimizer_fused,
    profiler_left_on,
    retained_graph,
    sharded_activation_checkpointing,
    sharded_backward_reduce,
    sharded_forward_gather,
    sharded_mixed_precision,
    sync_per_step,
    tensor_copy,
    tf32,
    torch_compile,
    torch_num_threads,
    validation_no_grad,
    zero_grad_set_to_none,
)

RULES = (
    dataloader_num_workers, dataloader_pin_memory, dataloader_persistent_workers, dataloader_prefetch_factor,
    data_slow_stage, batch_size, amp,
    tf32, cudnn_benchmark, zero_grad_set_to_none, autograd_detect_anomaly, profiler_left_on, sync_per_step,
    retained_graph, validation_no_grad, conv_bias_before_bn, tensor_copy, dataparallel, multi_gpu_unused,
    memory_pressure, optimizer_fused, optimizer_adamw, lr_schedule, grad_clipping, torch_compile, channels_last,
    compile_recompiles, torch_num_threads, sharded_forward_gather, sharded_backward_reduce,
    sharded_activation_checkpointing, sharded_mixed_precision,
)
BY_ID = {rule.ID: rule for rule in RULES}
