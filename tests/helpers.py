"""Helpers shared by the test modules (importable: tests/ is on pytest's pythonpath)."""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
SHARED_DATA = os.environ.get('MMEXT_DATA_ROOT',
                             osp.join(REPO_ROOT, '..', 'shared', 'data'))


def run_tool(args, timeout=900, env=None):
    """Run a command from the repo root with the test interpreter first on PATH.

    Returns the completed process; fails the test with the output tail when the
    command exits non-zero.
    """
    full_env = dict(os.environ, **(env or {}))
    full_env['PATH'] = osp.dirname(sys.executable) + os.pathsep + full_env.get(
        'PATH', '')
    full_env['PYTHON'] = sys.executable
    proc = subprocess.run(
        args, cwd=REPO_ROOT, env=full_env, capture_output=True, text=True,
        timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f'{args} exited {proc.returncode}:\n'
                    f'{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}')
    return proc


def assert_refused_before_training(args, message, timeout=300):
    """Run a tool that must refuse its options: argparse's exit status 2,
    ``message`` on stderr and no training iteration logged."""
    proc = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert message in proc.stderr
    assert 'Epoch(train)' not in proc.stdout + proc.stderr

# Marks a test that needs CUDA: skipped with the reason without one, selected
# by `pytest -m cuda` (what tools/gpu_check.sh runs).
CUDA_MARKS = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason='needs a CUDA device (torch sees none)')
]
# Devices a numeric test runs on: the CPU always, CUDA when torch sees one.
DEVICES = ['cpu', pytest.param('cuda', marks=CUDA_MARKS)]
