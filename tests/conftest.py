import os.path as osp
import sys

import pytest
from helpers import SHARED_DATA, run_tool


@pytest.fixture(scope='session')
def shared_data():
    if not osp.isdir(SHARED_DATA):
        pytest.skip(f'shared data not found at {SHARED_DATA} (set '
                    f'MMEXT_DATA_ROOT to its folder)')
    return SHARED_DATA


@pytest.fixture(scope='session')
def demo_data_dir(tmp_path_factory):
    """The embedded demo data, generated once per session in a temporary
    folder (nothing is written into the checkout)."""
    out = str(tmp_path_factory.mktemp('demo'))
    run_tool([sys.executable, 'tools/make_demo_data.py', '--out', out])
    return out


@pytest.fixture
def demo_data(demo_data_dir, monkeypatch):
    """:func:`demo_data_dir`, which the demo configs read during the test
    (``MMEXT_DEMO_DATA``, also in the tools the test runs)."""
    monkeypatch.setenv('MMEXT_DEMO_DATA', demo_data_dir)
    return demo_data_dir
