"""What the probe's data-pipeline timing and the monitor's reading of it both name: the
run folder's sub-folder the DataLoader workers write to, and the per-batch stages."""

FOLDER = "pipeline"  # RUN/pipeline/<rank>-<pid>.json, one a worker
HANDOFF = "taking a batch from a worker"  # per batch, on the training thread: its CPU is the unpickling
PIN = "pin_memory thread"  # per batch, the copy to page-locked memory
