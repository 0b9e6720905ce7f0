#!/usr/bin/env bash
# Usage: tools/dist_launch.sh NPROC SCRIPT [script args...]
# torchrun SCRIPT on NPROC processes of this node (NNODES, NODE_RANK, MASTER_ADDR and PORT set
# multi-node runs). Used by dist_train.sh and dist_test.sh.
NPROC=$1
SCRIPT=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The project's venv (make install) unless PYTHON names another interpreter.
[ -x "$ROOT/.venv/bin/python" ] && PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
PYTHON=${PYTHON:-python}

PYTHONPATH="$ROOT:$PYTHONPATH" \
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$NPROC" --master_port="$PORT" \
    "$SCRIPT" "${@:3}"
