#!/usr/bin/env bash
# `make demo`: train the two demo jobs (video: multigrid 3D CNN; det: Faster R-CNN R18-FPN with
# AGVM) on the demo data, then print where their logs and checkpoints went and their last metrics.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
OUT=${DEMO_WORK_DIR:-work_dirs/demo}
# The metrics of the last validation record (no loss) of a scalars.json.
LAST_METRICS='
import json, sys
val = [r for r in map(json.loads, open(sys.argv[1])) if "loss" not in r]
print(" ".join(f"{k} {v:.3f}" for k, v in val[-1].items() if "/" in k)
      if val else "none (no validation ran)")'

DEMOS=(
    "video:configs/demo/recognizer3d_r18_multigrid_demo-video.py"
    "det:configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py"
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
    echo "        metrics    $("$PYTHON" -c "$LAST_METRICS" "$(dirname "$log")/vis_data/scalars.json")"
    if [ "$name" = video ]; then
        # The multigrid plan's saving against its recipe.
        echo "        multigrid  $(grep -o 'total: .*' "$log" | tail -n 1)"
    fi
done
