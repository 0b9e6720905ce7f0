#!/usr/bin/env bash
# Usage: tools/dist_test.sh CONFIG CHECKPOINT NPROC [test.py args...]
CONFIG=$1
CHECKPOINT=$2
NPROC=$3
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
    "$ROOT/tools/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "${@:4}"
