#!/usr/bin/env bash
# Usage: tools/gpu_check.sh [--dry-run] [--lines NAME ...] [--work-dir DIR] [--budget SECONDS]
# One-command GPU check (at most 8 minutes): the CUDA tests, AGVM on the demo detector (1 GPU fp32
# and --amp, 2 processes), multigrid on the demo video recipe, AGVM's overhead on CUDA and the GPU
# modes of the benchmarks; one summary table, exit 1 if a line fails. Without CUDA: a dry run
# (arguments, tools, configs), one line saying so, exit 0. Details: tools/gpu_check.py --help.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The project's venv (make install) unless PYTHON names another interpreter.
[ -x "$ROOT/.venv/bin/python" ] && PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
PYTHON=${PYTHON:-python}
export PYTHON
cd "$ROOT" && exec "$PYTHON" tools/gpu_check.py "$@"
