"""Fixtures of the multigrid test modules."""
import os
import os.path as osp

import pytest


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
