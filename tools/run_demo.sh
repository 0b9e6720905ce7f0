#!/usr/bin/env bash
# `make demo`: train mmext's demo jobs on the embedded demo data (tools/make_demo_data.py)
# with tools/train.py, then say where their logs and checkpoints went.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
OUT=${DEMO_WORK_DIR:-work_dirs/demo}

DEMOS=(
    "video:configs/demo/recognizer3d_r18_demo-video.py"
    "det:configs/demo/faster-rcnn_r50_fpn_demo-det.py"
)

for demo in "${DEMOS[@]}"; do
    name=${demo%%:*}
    config=${demo#*:}
    echo "==> $name: $config"
    "$PYTHON" tools/train.py "$config" --work-dir "$OUT/$name"
done

echo
echo "Demo finished. Logs, metrics and checkpoints:"
for demo in "${DEMOS[@]}"; do
    name=${demo%%:*}
    dir="$OUT/$name"
    log=$(ls -t "$dir"/*/*.log 2>/dev/null | head -n 1)
    echo "  $name: work dir $ROOT/$dir"
    echo "        log        $ROOT/$log"
    echo "        scalars    $ROOT/$(dirname "$log")/vis_data/scalars.json"
    echo "        checkpoint $ROOT/$dir/$(cat "$dir/last_checkpoint" | xargs basename)"
done
