#!/usr/bin/env bash
# One node of a multi-node training job: torchrun's ranks on this node, watched by fastmon
# (headless), their figures served at /metrics for the cluster's Prometheus and recorded
# in fastmon-runs/node<N>. Afterwards `fastmon report fastmon-runs/node0/<run>
# fastmon-runs/node1/<run> ...` merges the nodes (each names its run at its own start).
# Which node this is comes from the scheduler:
#   Slurm (srun, one task a node): SLURM_NNODES, SLURM_NODEID; the job's first node hosts
#     the rendezvous
#   Kubernetes (a Kubeflow PyTorchJob with nprocPerNode): PET_NNODES, PET_NODE_RANK,
#     PET_NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT
#   by hand: NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT
# GPUS_PER_NODE: ranks on this node (default: PET_NPROC_PER_NODE, else 1); METRICS_PORT:
# where /metrics listens (default 9464; 0: a free one); FASTMON_RUNS_DIR (default
# fastmon-runs). The job's secret (FASTMON_JOB_SECRET_FILE, a file only you may read; the
# sbatch recipe makes one, the PyTorchJob mounts one): node 0's monitor then shows and
# records every node's ranks live. Usage: fastmon-node.sh TRAIN.PY [ARGS...]
set -euo pipefail

nnodes=${NNODES:-${SLURM_NNODES:-${PET_NNODES:-1}}}
node_rank=${NODE_RANK:-${SLURM_NODEID:-${PET_NODE_RANK:-0}}}
if [[ -z "${MASTER_ADDR:-}" && -n "${SLURM_JOB_NODELIST:-}" ]]; then
    # awk reads all of it: head would leave scontrol a broken pipe, fatal under pipefail
    MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | awk 'NR == 1')
fi

exec fastmon run --headless --log-to prometheus --metrics-port "${METRICS_PORT:-9464}" \
    --runs-dir "${FASTMON_RUNS_DIR:-fastmon-runs}/node${node_rank}" \
    --nnodes "$nnodes" --node-rank "$node_rank" --nproc-per-node "${GPUS_PER_NODE:-${PET_NPROC_PER_NODE:-1}}" \
    --master-addr "${MASTER_ADDR:-127.0.0.1}" --master-port "${MASTER_PORT:-29500}" \
    "$@"
