#!/usr/bin/env bash
# Usage: tools/gpu_check.sh [--bundle DIR [--target DIR]] [--dry-run] [--lines NAME ...]
#                           [--work-dir DIR] [--budget SECONDS]
#
# One-command GPU check of mmext: the CUDA tests, AGVM on the demo detector (1 GPU fp32 and --amp,
# 2 processes), multigrid on the demo video recipe, AGVM's overhead on CUDA and the GPU modes of
# the benchmarks; one summary table (with the python, torch, CUDA, cuDNN, NCCL, GPU and driver
# versions), exit 1 if a line fails. Without CUDA: a dry run (arguments, tools, configs), one
# line saying so, exit 0. Details and the lines: tools/gpu_check.py --help.
#
# Where the stack is installed (make install), it uses the project's .venv (or $PYTHON), with a
# budget of 480 s for the lines.
#
# On a lent GPU machine, which starts bare (python3 with torch and CUDA, no OpenMMLab stack, no
# network), make the bundle here first (tools/gpu_bundle.sh: about 25 MiB in .gpu_bundle/), carry
# that folder along with the working tree, and run there the one command
#     tools/gpu_check.sh --bundle .gpu_bundle
# It installs the bundle with pip --no-index into --target (default /tmp/mmext-gpu-site; about
# 20 s), builds mmcv's CUDA ops for the present GPU alone in the background (TORCH_CUDA_ARCH_LIST
# of the device, MAX_JOBS = its cores; minutes, not yet measured there), runs the lines that need
# no compiled ops meanwhile and the others once the ops are built, all inside --budget (default
# 570 s for the whole call, within a 10-minute command limit); the build is a line of the table.
# If the build fails or cannot finish in time, the table says so and which lines it skipped. A
# second call on the same machine reuses the installed bundle and the built ops. python3 there is
# the interpreter unless $PYTHON names another.
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
        -h|--help) usage; echo; exec "${PYTHON:-python3}" "$ROOT/tools/gpu_check.py" --help ;;
        *) ARGS+=("$1"); shift ;;
    esac
done

if [ -z "$BUNDLE" ]; then
    # The project's venv (make install) unless PYTHON names another interpreter.
    [ -x "$ROOT/.venv/bin/python" ] && PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
    PYTHON=${PYTHON:-python}
    export PYTHON
    cd "$ROOT" && exec "$PYTHON" tools/gpu_check.py "${ARGS[@]}"
fi

# The whole call counts against the budget: the install too.
STARTED=$(date +%s.%N)
PYTHON=${PYTHON:-python3}
MANIFEST=$BUNDLE/manifest.json
STAMP=$TARGET/.bundle-manifest.json
if [ ! -f "$MANIFEST" ]; then
    echo "gpu_check: no $MANIFEST; make the bundle with tools/gpu_bundle.sh" >&2
    exit 2
fi
# The target is emptied before an install: never a folder holding anything else.
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
    # mmcv without its compiled ops takes seconds; tools/gpu_check.py builds the ops beside the
    # lines that need none. mmcv's setup.py imports pkg_resources: the bundle's setuptools (< 81),
    # first on the path, provides it.
    MMCV_WITH_OPS=0 PYTHONPATH=$TARGET "${PIP[@]}" --no-build-isolation \
        "$BUNDLE"/sdist/mmcv-*.tar.gz
    bash "$ROOT/tools/install_stubs.sh" "$TARGET" "$BUNDLE/stubs"
    # Fixes of imports that fail with the machine's own packages (tools/overrides/README.md).
    cp -R "$BUNDLE/overrides/." "$TARGET/"
    # `mmext::` configs resolve through the installed mmext's .mim folder: point it at the working
    # tree, which may be newer than the bundle's wheel (mmext's code comes from the tree too, first
    # on PYTHONPATH below).
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
cd "$ROOT" && exec "$PYTHON" tools/gpu_check.py --bundle "$BUNDLE" --target "$TARGET" \
    --started-at "$STARTED" "${ARGS[@]}"
