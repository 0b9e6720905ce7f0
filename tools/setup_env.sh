#!/usr/bin/env bash
# Install the mmext stack into a virtual environment (default: .venv/ in the project root).
#
# Usage: tools/setup_env.sh [VENV_DIR]
#
# This is the one place where the install traps of the OpenMMLab 2.0 stack are handled; each is
# commented with its upstream cause. `make install` calls this script only when one of its inputs
# changed, so a second `make install` does nothing. Set PIP_FIND_LINKS to a folder holding a
# prebuilt mmcv 2.1.0 wheel to skip its ~22 minute source build.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${1:-$ROOT/.venv}
PY=$VENV/bin/python
PIP="$PY -m pip install --disable-pip-version-check"

step() {  # a progress line: pip runs quietly for minutes
    echo "setup_env: $1" >&2
}

pin() {  # the exact pin of package $1 in requirements/stack.txt
    grep -E "^$1==" "$ROOT/requirements/stack.txt"
}

[ -x "$PY" ] || python3 -m venv "$VENV"

# PIP_FIND_LINKS replaces pip's configured find-links instead of adding to them; on this machine
# type those hold the CPU torch wheel, without which torch==2.13.0 resolves to a multi-GB CUDA
# build from PyPI. Keep both.
CONFIG_LINKS=$("$PY" -m pip config get global.find-links 2>/dev/null || true)
if [ -n "${PIP_FIND_LINKS:-}" ] && [ -n "$CONFIG_LINKS" ]; then
    export PIP_FIND_LINKS="$PIP_FIND_LINKS $CONFIG_LINKS"
fi

# mmcv's setup.py imports pkg_resources, which setuptools>=81 removed; mmengine 0.10.7 also needs
# it to resolve `_base_ = 'mmdet::...'` configs (replaced upstream after 0.10.7 by
# open-mmlab/mmengine#1676).
step "[1/6] pip, setuptools<81, wheel"
SETUPTOOLS='setuptools<81'
$PIP -q --upgrade pip "$SETUPTOOLS" wheel

# torch first and pinned: an unpinned torch pulled in by another package would be a multi-GB
# CUDA build. No torchvision: PyPI's build does not load beside the CPU torch wheel and nothing
# in mmext needs it.
step "[2/6] torch and mmengine (a minute or two: torch is about 200 MB)"
$PIP -q "$(pin torch)" "$(pin mmengine)" ninja psutil

# No mmcv 2.1.0 wheel exists on PyPI for torch > 2.1, and mmdet/mmaction2/mmseg all assert
# 2.0.0rc4 <= mmcv < 2.2.0. Build it against the installed torch (no build isolation) with the
# compiled ops (RoIAlign, NMS, ...). pip caches the built wheel; PIP_FIND_LINKS may offer one.
step "[3/6] mmcv 2.1.0 with ops (seconds from a wheelhouse; about 22 minutes compiling without one)"
if ! "$PY" -c "import mmcv, mmcv.ops; assert mmcv.__version__ == '2.1.0'" 2>/dev/null; then
    MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-2} $PIP --no-build-isolation "$(pin mmcv)"
fi

# The toolboxes, plus what their metadata forgets: mmseg imports ftfy and regex
# (open-mmlab/mmsegmentation#3704), mmaction2 imports importlib_metadata (not in its
# requirements/mminstall or setup.py install_requires).
step "[4/6] mmdet, mmaction2, mmsegmentation, decord and the test requirements"
$PIP -q "$(pin mmdet)" "$(pin mmaction2)" "$(pin mmsegmentation)" "$(pin decord)" \
    importlib_metadata ftfy regex -r "$ROOT/requirements/tests.txt"

# The toolboxes pull a newer setuptools back in; pin it again, last (see above).
$PIP -q "$SETUPTOOLS"

# The mmaction2 1.2.0 wheel and sdist lack mmaction/models/localizers/drn/, so
# `import mmaction.models` fails (open-mmlab/mmaction2#2714). The DRN localizer is irrelevant to
# mmext: install the stub `drn` package of tools/stubs/ (its DRN raises on use), so everything
# else imports.
step "[5/6] the mmaction2 DRN stub"
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
bash "$ROOT/tools/install_stubs.sh" "$SITE"

step "[6/6] mmext (editable)"
$PIP -q --no-build-isolation --no-deps -e "$ROOT"
# mmengine's get_installed_path() (behind `_base_ = 'mmext::...'`) assumes the package sits in its
# distribution's folder, which is site-packages; a PEP 660 editable install leaves it in the
# project. Link it there so mmext/.mim/configs resolves to this checkout's configs/.
ln -sfn "$ROOT/mmext" "$SITE/mmext"

"$PY" -c "import mmext, mmdet.models, mmaction.models, mmseg.models, mmcv.ops; print('mmext stack OK')"
