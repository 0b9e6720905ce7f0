import os
import os.path as osp
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


@pytest.fixture
def ann_file(tmp_path, demo_data):
    """Annotations listing a truncated mp4 first, then good demo clips."""
    video_dir = osp.join(demo_data, 'video')
    with open(osp.join(video_dir, 'train.txt')) as f:
        good = [line.split() for line in f.read().splitlines()]
    src = osp.join(video_dir, good[0][0])
    broken = tmp_path / 'broken.mp4'
    with open(src, 'rb') as f:
        broken.write_bytes(f.read()[:os.path.getsize(src) // 3])
    lines = [f'{broken} 0'] + [
        f'{osp.join(video_dir, name)} {label}' for name, label in good
    ]
    out = tmp_path / 'train.txt'
    out.write_text('\n'.join(lines) + '\n')
    return str(out), str(broken)
