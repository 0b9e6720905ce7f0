#!/usr/bin/env bash
# Usage: tools/gpu_bundle.sh [--out DIR]
#        tools/gpu_bundle.sh --proof ENV_DIR [--out DIR] [--with-ops]
#
# Run here, with the package registry in reach. Downloads into DIR (default .gpu_bundle/, ignored
# by git) what `tools/gpu_check.sh --bundle DIR` needs on a lent GPU machine beyond that machine's
# own packages: cp312 wheels, the mmcv 2.1.0 sdist, the import-time stubs and mmext's wheel; writes
# DIR/manifest.json and prints the sizes (the bundle and the working tree must fit in 64 MiB).
# A second run downloads only what changed. Details: tools/gpu_bundle.py --help.
#
# --proof ENV_DIR: the CPU proof of the bundle. Makes ENV_DIR (outside the checkout) a Python 3.12
# environment with stand-ins for the GPU machine's packages (requirements/gpu_proof.txt; PyPI's
# torch 2.11.0, a multi-GB CUDA build, runs on a CPU), bundles DIR if it has no manifest, and runs
# `tools/gpu_check.sh --bundle DIR --dry-run` with that Python: the install without network, the
# imports, the configs. --with-ops then builds mmcv's CPU ops from the bundled sdist against that
# torch (about an hour on 2 shared cores) and repeats the dry run, which then imports mmcv.ops and the
# toolboxes' models too. Set PYTHON312 to the Python 3.12 to use (default: python3.12 on PATH).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"; }

OUT=$ROOT/.gpu_bundle
ENV_DIR=
WITH_OPS=0
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUT=$2; shift 2 ;;
        --proof) ENV_DIR=$2; shift 2 ;;
        --with-ops) WITH_OPS=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)

if [ -z "$ENV_DIR" ]; then
    [ "$WITH_OPS" = 0 ] || { echo "gpu_bundle: --with-ops needs --proof" >&2; exit 2; }
    exec "${PYTHON:-python3}" "$ROOT/tools/gpu_bundle.py" --out "$OUT"
fi

mkdir -p "$ENV_DIR"
ENV_DIR=$(cd "$ENV_DIR" && pwd)
case $ENV_DIR/ in
    "$ROOT"/*) echo "gpu_bundle: keep the proof environment outside the checkout" >&2; exit 2 ;;
esac
PY=$ENV_DIR/bin/python
[ -x "$PY" ] || "${PYTHON312:-python3.12}" -m venv "$ENV_DIR"
# The newest pip, as a recent image would have: it builds mmcv's sdist the strictest way.
"$PY" -m pip install -q --disable-pip-version-check --upgrade pip
"$PY" -m pip install -q --disable-pip-version-check -r "$ROOT/requirements/gpu_proof.txt"
[ -f "$OUT/manifest.json" ] || "${PYTHON:-python3}" "$ROOT/tools/gpu_bundle.py" --out "$OUT"

TARGET=$ENV_DIR/mmext-site
dry_run() {
    PYTHON=$PY "$ROOT/tools/gpu_check.sh" --bundle "$OUT" --target "$TARGET" --dry-run \
        --work-dir "$ENV_DIR/work_dirs"
}
dry_run
if [ "$WITH_OPS" = 1 ]; then
    SDIST=$OUT/$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['mmcv_sdist'])" \
        "$OUT/manifest.json")
    PYTHONPATH=$TARGET "$PY" "$ROOT/tools/mmcv_ops.py" --cpu --sdist "$SDIST" \
        --target "$TARGET" --work-dir "$ENV_DIR/mmcv-build" --jobs "$(nproc)"
    dry_run
fi
