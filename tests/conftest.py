import os.path as osp
import sys

import pytest
from helpers import REPO_ROOT, SHARED_DATA, run_tool


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


@pytest.fixture(scope='session')
def repo_demo_data():
    """`data/demo` of the checkout (what `make demo-data` writes), made if
    missing, for tests whose configs read the demo configs' default paths."""
    out = osp.join(REPO_ROOT, 'data', 'demo')
    if not osp.exists(osp.join(out, '.stamp')):
        run_tool([sys.executable, 'tools/make_demo_data.py', '--out', out])
        open(osp.join(out, '.stamp'), 'w').close()
    return out
