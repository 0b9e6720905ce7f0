#!/usr/bin/env bash
# Usage: tools/dist_test.sh CONFIG CHECKPOINT NPROC [test.py args...]
TOOLS=$(cd "$(dirname "$0")" && pwd)
exec "$TOOLS/dist_launch.sh" "$3" "$TOOLS/test.py" "$1" "$2" --launcher pytorch "${@:4}"
