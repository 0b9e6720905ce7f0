"""Helpers shared by the test modules (importable: tests/ is on pytest's pythonpath)."""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
from mmengine.dataset import BaseDataset
from mmengine.model import BaseModel
from torch import nn

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
SHARED_DATA = os.environ.get('MMEXT_DATA_ROOT',
                             osp.join(REPO_ROOT, '..', 'shared', 'data'))


@pytest.fixture(scope='session')
def shared_data():
    """The real small datasets' folder (the conftests import it)."""
    if not osp.isdir(SHARED_DATA):
        pytest.skip(f'shared data not found at {SHARED_DATA} (set '
                    f'MMEXT_DATA_ROOT to its folder)')
    return SHARED_DATA


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

def logged_errors(work_dir) -> list:
    """The ERROR lines of the run log files under ``work_dir``
    (``<work_dir>/<timestamp>/<timestamp>.log``, as mmengine writes them):
    where refusals (``mmext.log.refuse``) land."""
    import glob
    lines = []
    for path in sorted(glob.glob(osp.join(str(work_dir), '*', '*.log'))):
        with open(path) as f:
            lines += [line for line in f if ' - ERROR - ' in line]
    return lines


# Marks a test that needs CUDA: skipped with the reason without one, selected
# by `pytest -m cuda` (what .dev_scripts/gpu_check.sh runs).
CUDA_MARKS = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason='needs a CUDA device (torch sees none)')
]
# Devices a numeric test runs on: the CPU always, CUDA when torch sees one.
DEVICES = ['cpu', pytest.param('cuda', marks=CUDA_MARKS)]


class ToyRegressor(BaseModel):
    """Two linear layers (``backbone`` 2 -> 4, ``head`` 4 -> 1), seeded: the
    smallest model with two AGVM modules, for runner tests. Register it
    under the test's own name (``MODELS.register_module(name=...,
    module=ToyRegressor, force=True)``)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Linear(2, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, inputs, labels=None, mode='tensor', **kwargs):
        out = self.head(torch.tanh(self.backbone(torch.stack(inputs))))
        if mode == 'loss':
            return dict(loss=((out - torch.stack(labels))**2).mean())
        return out


def toy_loader(dataset: str, batch_size: int) -> dict:
    """A ``train_dataloader`` config of the registered dataset type
    ``dataset``, in order (no shuffle), samples collated as lists."""
    return dict(dataset=dict(type=dataset),
                sampler=dict(type='DefaultSampler', shuffle=False),
                collate_fn=dict(type='pseudo_collate'),
                batch_size=batch_size, num_workers=0)


class ToyRegressionData(BaseDataset):
    """``size`` seeded samples ``inputs`` (2,), ``labels`` (1,)."""

    size = 16

    def __init__(self, **kwargs):
        super().__init__(serialize_data=False, **kwargs)

    def load_data_list(self):
        gen = torch.Generator().manual_seed(0)
        return [dict(inputs=torch.randn(2, generator=gen),
                     labels=torch.randn(1, generator=gen))
                for _ in range(self.size)]


def cpu_norm(cfg):
    """Turn every SyncBN of a model config into BN, in place: SyncBN needs
    a process group to build on CPU, and BN trains / freezes alike."""
    if isinstance(cfg, dict):
        if cfg.get('type') == 'SyncBN':
            cfg['type'] = 'BN'
        for value in cfg.values():
            cpu_norm(value)
    elif isinstance(cfg, list):
        for value in cfg:
            cpu_norm(value)
