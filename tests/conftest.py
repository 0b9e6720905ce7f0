import os.path as osp
import sys

import pytest
from helpers import SHARED_DATA, run_tool


@pytest.fixture(scope='session')
def shared_data():
    if not osp.isdir(SHARED_DATA):
        pytest.skip(f'shared data not found at {SHARED_DATA}')
    return SHARED_DATA


@pytest.fixture(scope='session')
def demo_data(tmp_path_factory):
    """The embedded demo data, generated once per session."""
    out = tmp_path_factory.mktemp('demo')
    run_tool([sys.executable, 'tools/make_demo_data.py', '--out', str(out)])
    return str(out)
