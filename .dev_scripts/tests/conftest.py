import os.path as osp

import pytest
from helpers import SHARED_DATA


@pytest.fixture(autouse=True)
def tool_modules(monkeypatch):
    """The harnesses run as their commands say: with the user tools'
    modules (``bench_utils``, ``multigrid_speedup``, ``agvm_diagnostic``) on
    ``PYTHONPATH``."""
    monkeypatch.setenv('PYTHONPATH', 'tools/benchmark:tools/analysis')


@pytest.fixture(scope='session')
def shared_data():
    if not osp.isdir(SHARED_DATA):
        pytest.skip(f'shared data not found at {SHARED_DATA} (set '
                    f'MMEXT_DATA_ROOT to its folder)')
    return SHARED_DATA
