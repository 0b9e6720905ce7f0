#!/usr/bin/env bash
# `make demo`: train mmext's two demo jobs on the embedded demo data (tools/make_demo_data.py)
# with tools/train.py, then say where their logs and checkpoints went:
#   video: multigrid training of a small 3D CNN (long + short cycle, sub-batch BN, precise BN);
#   det:   Faster R-CNN R18-FPN with the AGVM optimizer wrapper (halves = accumulated micro-batches).
# Each job's last validation metrics are printed at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
OUT=${DEMO_WORK_DIR:-work_dirs/demo}
# The last validation record of a scalars.json (records without a loss), its metric keys.
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
        # The multigrid plan's saving against its recipe (the same config
        # without the hook).
        echo "        multigrid  $(grep -o 'total: .*' "$log" | tail -n 1)"
    fi
done
