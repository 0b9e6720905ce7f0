#!/usr/bin/env bash
# Usage: tools/dist_train.sh CONFIG NPROC [train.py args...]
# Multi-process training with torchrun: NCCL on GPUs, gloo on a CPU-only machine.
CONFIG=$1
NPROC=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The project's venv (make install) unless PYTHON names another interpreter.
[ -x "$ROOT/.venv/bin/python" ] && PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
PYTHON=${PYTHON:-python}

PYTHONPATH="$ROOT:$PYTHONPATH" \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$NPROC" --master_port="$PORT" \
    "$ROOT/tools/train.py" "$CONFIG" --launcher pytorch "${@:3}"
