#!/usr/bin/env bash
# Usage: .dev_scripts/gpu_check.sh [--bundle DIR [--target DIR]] [--dry-run] [--lines NAME ...]
#                           [--work-dir DIR] [--budget SECONDS]
#
# One-command GPU check of mmext: runs the lines of .dev_scripts/gpu_check.py with the project's .venv
# (or $PYTHON), prints each line's row as it ends (also into WORK_DIR/summary.txt) and exits 1 if a
# line fails; without CUDA, a dry run.
# On a bare lent GPU machine, with the bundle of .dev_scripts/gpu_bundle.sh carried along:
#     .dev_scripts/gpu_check.sh --bundle .gpu_bundle
# installs the bundle with python3 (or $PYTHON) into --target (default /tmp/mmext-gpu-site; a
# second call reuses it), then runs the check, which installs the bundle's prebuilt mmcv CUDA ops
# if they were built for this machine's stack, else builds them (and, with $OUT set, packs them
# there to bring back).
# Details: .dev_scripts/README.md, "Checking a GPU machine".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"; }

BUNDLE=
TARGET=${TMPDIR:-/tmp}/mmext-gpu-site
ARGS=()
while [ $# -gt 0 ]; do
    case $1 in
        --bundle) BUNDLE=$(cd "$2" && pwd); shift 2 ;;
        --target) TARGET=$2; shift 2 ;;
        -h|--help) usage; echo; exec "${PYTHON:-python3}" "$ROOT/.dev_scripts/gpu_check.py" --help ;;
        *) ARGS+=("$1"); shift ;;
    esac
done

if [ -z "$BUNDLE" ]; then
    [ -x "$ROOT/.venv/bin/python" ] && PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
    PYTHON=${PYTHON:-python}
    export PYTHON
    cd "$ROOT" && exec "$PYTHON" .dev_scripts/gpu_check.py "${ARGS[@]}"
fi

# The whole call counts against the budget: the install too.
STARTED=$(date +%s.%N)
PYTHON=${PYTHON:-python3}
MANIFEST=$BUNDLE/manifest.json
STAMP=$TARGET/.bundle-manifest.json
if [ ! -f "$MANIFEST" ]; then
    echo "gpu_check: no $MANIFEST; make the bundle with .dev_scripts/gpu_bundle.sh" >&2
    exit 2
fi
# The target is emptied before an install: never a folder of anything else.
if [ -n "$(ls -A "$TARGET" 2>/dev/null)" ] && [ ! -f "$STAMP" ]; then
    echo "gpu_check: --target $TARGET holds files of no bundle install; name a new folder" >&2
    exit 2
fi
mkdir -p "$TARGET"
TARGET=$(cd "$TARGET" && pwd)
STAMP=$TARGET/.bundle-manifest.json
# A bundle installed by an earlier call on this machine is reused, with the ops it built.
if ! cmp -s "$MANIFEST" "$STAMP"; then
    rm -rf "$TARGET"
    mkdir -p "$TARGET"
    PIP=("$PYTHON" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile
         --target "$TARGET")
    "${PIP[@]}" "$BUNDLE"/wheels/*.whl
    # mmcv without its compiled ops (seconds); its setup.py imports pkg_resources, which the
    # bundle's setuptools (< 81), first on the path, provides.
    MMCV_WITH_OPS=0 PYTHONPATH=$TARGET "${PIP[@]}" --no-build-isolation \
        "$BUNDLE"/sdist/mmcv-*.tar.gz
    bash "$ROOT/tools/install_stubs.sh" "$TARGET" "$BUNDLE/stubs"
    cp -R "$BUNDLE/overrides/." "$TARGET/"
    # `mmext::` configs resolve through the installed mmext's .mim: point it at the working tree.
    for name in configs tools model-index.yml; do
        rm -rf "$TARGET/mmext/.mim/$name"
        ln -s "$ROOT/$name" "$TARGET/mmext/.mim/$name"
    done
    if [ -f "$BUNDLE/python-include.tar.gz" ]; then
        mkdir -p "$TARGET/.python-include"
        tar -xzf "$BUNDLE/python-include.tar.gz" -C "$TARGET/.python-include"
    fi
    cp "$MANIFEST" "$STAMP"
fi

export PYTHON
export PYTHONPATH=$ROOT:$TARGET${PYTHONPATH:+:$PYTHONPATH}
cd "$ROOT" && exec "$PYTHON" .dev_scripts/gpu_check.py --bundle "$BUNDLE" --target "$TARGET" \
    --started-at "$STARTED" "${ARGS[@]}"
