"""tools/data/prepare_frames.py: the videos of a config as JPEG frames at
the size of the pipeline's first resize, with mmaction2's rawframe list;
the frames equal the video's within JPEG's error, and RawframeDataset
trains from them."""
import os.path as osp
import shutil
import subprocess
import sys

import mmcv
import numpy as np
import pytest
from helpers import REPO_ROOT, run_tool
from mmengine.config import Config
from mmengine.registry import DATASETS, DefaultScope

import mmext  # noqa: F401
from mmext.multigrid import FrameCache

TOOL = 'tools/data/prepare_frames.py'
CONFIG = 'configs/demo/recognizer3d_r18_demo-video.py'


def test_frames_equal_the_video_within_jpeg_error(demo_data, tmp_path):
    out = str(tmp_path / 'frames')
    proc = run_tool([sys.executable, TOOL, CONFIG, '--out', out])
    assert "dataset=dict(type='RawframeDataset'" in proc.stdout
    cfg = Config.fromfile(CONFIG)
    with open(cfg.train_dataloader.dataset.ann_file) as f:
        videos = [ln.split() for ln in f if ln.strip()]
    with open(osp.join(out, 'train.txt')) as f:
        frames = [ln.split() for ln in f]
    assert len(frames) == len(videos) == 64
    cache = FrameCache.from_pipeline(cfg.train_pipeline, str(tmp_path), 1.0)
    root = cfg.train_dataloader.dataset.data_prefix.video
    for (video, label), (folder, count, frame_label) in list(zip(
            videos, frames))[::16]:
        assert (folder, frame_label) == (osp.splitext(video)[0], label)
        decoded = cache.decode(osp.join(root, video))
        assert int(count) == len(decoded) and min(decoded.shape[1:3]) == 64
        read = np.stack([
            mmcv.imread(osp.join(out, folder, f'img_{k:05d}.jpg'),
                        channel_order='rgb')
            for k in range(1, len(decoded) + 1)])
        error = np.abs(read.astype(float) - decoded)
        psnr = 10 * np.log10(255**2 / np.mean(error**2))
        # JPEG at quality 95 (4:2:0 chroma) on these noisy synthetic frames.
        assert error.mean() < 3.0 and psnr > 35, (error.mean(), psnr)


def test_rawframe_dataset_reads_the_frames(demo_data, tmp_path):
    out = str(tmp_path / 'frames')
    run_tool([sys.executable, TOOL, CONFIG, '--out', out, '--quality', '90'])
    pipeline = Config.fromfile(CONFIG).train_pipeline
    pipeline = [dict(type='RawFrameDecode') if t['type'] == 'DecordDecode'
                else t for t in pipeline if t['type'] != 'DecordInit']
    with DefaultScope.overwrite_default_scope('mmaction'):
        dataset = DATASETS.build(dict(
            type='RawframeDataset', ann_file=osp.join(out, 'train.txt'),
            data_prefix=dict(img=out), filename_tmpl='img_{:05d}.jpg',
            pipeline=pipeline))
    assert dataset[0]['inputs'].shape == (1, 3, 16, 56, 56)


@pytest.mark.parametrize('args, message', [
    (['--quality', '0'], '--quality must be in 1..100, got 0'),
    (['--cfg-options', 'train_dataloader.dataset.pipeline.0.type=PyAVInit'],
     'needs one DecordInit in its pipeline, got 0'),
])
def test_bad_options_are_refused(tmp_path, args, message):
    proc = subprocess.run([sys.executable, TOOL, CONFIG, '--out',
                           str(tmp_path)] + args, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and message in proc.stderr


def test_an_unreadable_video_is_named_and_left_out(demo_data, tmp_path,
                                                   monkeypatch):
    # A copy of the session's demo videos: one of them is broken here.
    shutil.copytree(osp.join(demo_data, 'video'),
                    str(tmp_path / 'demo' / 'video'))
    monkeypatch.setenv('MMEXT_DEMO_DATA', str(tmp_path / 'demo'))
    cfg = Config.fromfile(CONFIG)
    root = cfg.train_dataloader.dataset.data_prefix.video
    with open(cfg.train_dataloader.dataset.ann_file) as f:
        first = f.readline().split()[0]
    with open(osp.join(root, first), 'wb') as f:
        f.write(b'not a video')
    out = str(tmp_path / 'frames')
    proc = run_tool([sys.executable, TOOL, CONFIG, '--out', out])
    assert f'skipped {osp.join(root, first)}: cannot decode it' in (
        proc.stderr)
    assert 'wrote 63 videos as frames' in proc.stdout
    assert '(1 left out)' in proc.stdout
    with open(osp.join(out, 'train.txt')) as f:
        assert osp.splitext(first)[0] not in f.read()
