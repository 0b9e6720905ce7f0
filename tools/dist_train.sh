#!/usr/bin/env bash
# Usage: tools/dist_train.sh CONFIG NPROC [train.py args...]
# Multi-process training with torchrun: NCCL on GPUs, gloo on a CPU-only machine.
TOOLS=$(cd "$(dirname "$0")" && pwd)
exec "$TOOLS/dist_launch.sh" "$2" "$TOOLS/train.py" "$1" --launcher pytorch "${@:3}"
