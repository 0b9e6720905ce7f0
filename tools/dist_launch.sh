#!/usr/bin/env bash
# Usage: tools/dist_launch.sh NPROC SCRIPT [script args...]
# torchrun SCRIPT on NPROC processes of this node. Environment: PORT (default 29500; one per
# run on a machine), NNODES, NODE_RANK and MASTER_ADDR (multi-node runs), PYTHON (.venv's).
NPROC=$1
SCRIPT=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$ROOT/.venv/bin/python" ] && PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
PYTHON=${PYTHON:-python}

# The master binds PORT: a busy one would fail inside torchrun (EADDRINUSE) on every rank.
if [ "$NODE_RANK" = 0 ] && ! "$PYTHON" -c "import socket, sys
s = socket.socket()
try:
    s.bind(('', int('$PORT')))
except OSError:
    sys.exit(1)" 2>/dev/null; then
    echo "torchrun's port $PORT is in use (another run on this machine?): choose another," \
         "e.g. PORT=$((PORT + 1)) tools/dist_train.sh CONFIG $NPROC" >&2
    exit 1
fi

PYTHONPATH="$ROOT:$PYTHONPATH" \
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$NPROC" --master_port="$PORT" \
    "$SCRIPT" "${@:3}"
