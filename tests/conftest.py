import sys

import pytest
from helpers import run_tool, shared_data  # noqa: F401 (a fixture)


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
