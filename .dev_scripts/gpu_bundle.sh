#!/usr/bin/env bash
# Usage: .dev_scripts/gpu_bundle.sh [--out DIR] [--prebuilt DIR]
#        .dev_scripts/gpu_bundle.sh --proof ENV_DIR [--out DIR] [--with-ops]
#
# Run here, with the package registry in reach: writes into DIR (default .gpu_bundle/) the bundle
# of .dev_scripts/gpu_bundle.py that `.dev_scripts/gpu_check.sh --bundle DIR` installs on a bare GPU machine;
# --prebuilt DIR adds the mmcv-ops.tar.xz and .json a GPU check wrote to $OUT (kept in DIR/prebuilt).
# --proof ENV_DIR: the CPU proof. Makes ENV_DIR (outside the checkout) a Python 3.12 ($PYTHON312)
# environment with stand-ins for the GPU machine's packages (.dev_scripts/requirements/gpu_proof.txt) and runs
# `.dev_scripts/gpu_check.sh --bundle DIR --dry-run` with it; --with-ops then builds mmcv's CPU ops from
# the bundled sdist (about an hour here) and repeats the dry run. Details: .dev_scripts/README.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"; }

OUT=$ROOT/.gpu_bundle
PREBUILT=()
ENV_DIR=
WITH_OPS=0
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUT=$2; shift 2 ;;
        --prebuilt) PREBUILT=(--prebuilt "$2"); shift 2 ;;
        --proof) ENV_DIR=$2; shift 2 ;;
        --with-ops) WITH_OPS=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)

if [ -z "$ENV_DIR" ]; then
    [ "$WITH_OPS" = 0 ] || { echo "gpu_bundle: --with-ops needs --proof" >&2; exit 2; }
    exec "${PYTHON:-python3}" "$ROOT/.dev_scripts/gpu_bundle.py" --out "$OUT" ${PREBUILT[@]+"${PREBUILT[@]}"}
fi

mkdir -p "$ENV_DIR"
ENV_DIR=$(cd "$ENV_DIR" && pwd)
case $ENV_DIR/ in
    "$ROOT"/*) echo "gpu_bundle: keep the proof environment outside the checkout" >&2; exit 2 ;;
esac
PY=$ENV_DIR/bin/python
[ -x "$PY" ] || "${PYTHON312:-python3.12}" -m venv "$ENV_DIR"
# The newest pip, as a recent image would have (the strictest build of mmcv's sdist).
"$PY" -m pip install -q --disable-pip-version-check --upgrade pip
"$PY" -m pip install -q --disable-pip-version-check -r "$ROOT/.dev_scripts/requirements/gpu_proof.txt"
[ -f "$OUT/manifest.json" ] || "${PYTHON:-python3}" "$ROOT/.dev_scripts/gpu_bundle.py" --out "$OUT"

TARGET=$ENV_DIR/mmext-site
dry_run() {
    PYTHON=$PY "$ROOT/.dev_scripts/gpu_check.sh" --bundle "$OUT" --target "$TARGET" --dry-run \
        --work-dir "$ENV_DIR/work_dirs"
}
dry_run
if [ "$WITH_OPS" = 1 ]; then
    SDIST=$OUT/$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['mmcv_sdist'])" \
        "$OUT/manifest.json")
    PYTHONPATH=$TARGET "$PY" "$ROOT/.dev_scripts/mmcv_ops.py" --cpu --sdist "$SDIST" \
        --target "$TARGET" --work-dir "$ENV_DIR/mmcv-build" --jobs "$(nproc)"
    dry_run
fi
