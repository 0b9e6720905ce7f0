"""mmext.CachedVideoDataset: clips decoded once into a frame cache on disk.

A clip from the cache equals a fresh decode after the same transforms and
seeds; two loader workers share one copy of the frames; a dataset over the
bound, a cache of another pipeline and a stale cache are refused before
training; an interrupted fill leaves nothing a later run trusts; an
unreadable clip is named when it is loaded."""
import copy
import multiprocessing
import os
import os.path as osp
import random
import shutil

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT
from mmengine.config import Config
from mmengine.registry import DATASETS, DefaultScope

import mmext  # noqa: F401
from mmext.multigrid import FrameCache
from mmext.multigrid.data import (BrokenClipError, MultigridDataset,
                                  resize_pipeline)

DEMO_CONFIG = osp.join(REPO_ROOT, 'configs', 'demo',
                       'recognizer3d_r18_demo-video.py')


@pytest.fixture
def videos(demo_data_dir, tmp_path):
    """A copy of the demo's video folder (its files may be changed)."""
    folder = str(tmp_path / 'video')
    shutil.copytree(osp.join(demo_data_dir, 'video'), folder)
    return folder


def dataset_cfg(videos, cache_dir=None, **kwargs):
    """The demo video config's train dataset on ``videos``; with
    ``cache_dir`` a CachedVideoDataset there."""
    cfg = copy.deepcopy(Config.fromfile(DEMO_CONFIG).train_dataloader.dataset)
    cfg.update(dict(ann_file=osp.join(videos, 'train.txt'),
                    data_prefix=dict(video=videos)), **kwargs)
    if cache_dir is not None:
        cfg.update(type='mmext.CachedVideoDataset', cache_dir=cache_dir)
    return cfg


def build(cfg):
    with DefaultScope.overwrite_default_scope('mmaction'):
        return DATASETS.build(cfg)


def multigrid(dataset, pipelines):
    with DefaultScope.overwrite_default_scope('mmaction'):
        return MultigridDataset(dataset, pipelines)


def clips(dataset, n, seed=0):
    """The ``inputs`` of samples 0..n-1, each under its own seed."""
    out = []
    for i in range(n):
        random.seed(seed + i)
        np.random.seed(seed + i)
        out.append(dataset[i]['inputs'])
    return out


def test_cached_clips_equal_a_fresh_decode(videos, tmp_path):
    plain = build(dataset_cfg(videos))
    cached = build(dataset_cfg(videos, str(tmp_path / 'cache')))
    fresh = clips(plain, 6)
    filled = clips(cached, 6)  # decodes and stores
    assert (cached.frame_cache.hits, cached.frame_cache.misses) == (0, 6)
    again = clips(cached, 6)  # from the cache
    assert (cached.frame_cache.hits, cached.frame_cache.misses) == (6, 6)
    assert fresh[0].shape == (1, 3, 16, 56, 56)  # one clip, C, T, S, S
    for a, b, c in zip(fresh, filled, again):
        assert torch.equal(a, b) and torch.equal(a, c)
    # Frames are kept at the first resize's size (short side 64).
    frames = cached.frame_cache.frames(cached.get_data_info(0)['filename'])
    assert frames.dtype == np.uint8 and min(frames.shape[1:3]) == 64


def test_a_later_run_reuses_the_cache(videos, tmp_path):
    cfg = dataset_cfg(videos, str(tmp_path / 'cache'))
    first = build(cfg)
    clips(first, 3)
    second = build(cfg)
    assert second.frame_cache.clips == first.frame_cache.clips
    clips(second, 3)
    assert (second.frame_cache.hits, second.frame_cache.misses) == (3, 0)


def test_a_multigrid_stage_resizes_from_the_cache(videos, tmp_path):
    cached = build(dataset_cfg(videos, str(tmp_path / 'cache')))
    base = Config.fromfile(DEMO_CONFIG).train_pipeline
    mg = multigrid(cached, [resize_pipeline(base, 4, 40), base])
    small, full = mg[(0, 0)]['inputs'], mg[(0, 1)]['inputs']
    assert small.shape == (1, 3, 4, 40, 40)
    assert full.shape == (1, 3, 16, 56, 56)
    # One decode of the video served both shapes.
    assert (cached.frame_cache.misses, cached.frame_cache.hits) == (1, 1)


def _hold_all(cache, names, ready, measured):
    """A loader worker's view: every clip of the cache mapped and read."""
    held = [cache.frames(name) for name in names]
    assert sum(int(a[:, ::8, ::8].sum()) for a in held) > 0
    for a in held:  # touch every page
        np.asarray(a).sum()
    ready.wait()
    measured.wait()


def _mapped_kib(pid, folder):
    """``(Rss, Pss)`` in KiB of the mappings of files in ``folder``."""
    rss = pss = 0
    path = None
    with open(f'/proc/{pid}/smaps') as f:
        for line in f:
            fields = line.split()
            if '-' in fields[0] and not fields[0].endswith(':'):
                path = fields[-1] if len(fields) >= 6 else None
            elif path and path.startswith(folder):
                if fields[0] == 'Rss:':
                    rss += int(fields[1])
                elif fields[0] == 'Pss:':
                    pss += int(fields[1])
    return rss, pss


@pytest.mark.skipif(not osp.exists('/proc/self/smaps'),
                    reason='needs /proc/<pid>/smaps (Linux)')
def test_two_workers_share_one_copy(videos, tmp_path):
    folder = str(tmp_path / 'cache')
    cached = build(dataset_cfg(videos, folder))
    names = [cached.get_data_info(i)['filename'] for i in range(len(cached))]
    for name in names:
        cached.frame_cache.frames(name)  # fill
    kib = cached.frame_cache.nbytes() / 1024
    ctx = multiprocessing.get_context('fork')  # as mmengine's loaders
    ready, measured = ctx.Barrier(3), ctx.Barrier(3)
    workers = [ctx.Process(target=_hold_all,
                           args=(cached.frame_cache, names, ready, measured))
               for _ in range(2)]
    for w in workers:
        w.start()
    ready.wait(timeout=120)
    try:
        usage = [_mapped_kib(w.pid, folder) for w in workers]
    finally:
        measured.wait(timeout=120)
        for w in workers:
            w.join(timeout=60)
    # Each worker sees all frames; together they hold one copy (the pages
    # are shared: each worker's proportional share is half).
    for rss, _ in usage:
        assert rss == pytest.approx(kib, rel=0.05, abs=64)
    assert sum(pss for _, pss in usage) == pytest.approx(kib, rel=0.05,
                                                         abs=64)


def test_a_dataset_over_the_bound_is_refused(videos, tmp_path):
    cfg = dataset_cfg(videos, str(tmp_path / 'cache'), max_cache_gib=1e-4)
    with pytest.raises(ValueError, match=r'> max_cache_gib=0.0001; raise it'):
        build(cfg)


@pytest.mark.parametrize('value', [0, -1.0, 'big', True])
def test_a_bad_bound_is_refused(videos, tmp_path, value):
    cfg = dataset_cfg(videos, str(tmp_path / 'cache'), max_cache_gib=value)
    with pytest.raises(ValueError, match=f'max_cache_gib must be > 0, got '
                       f'{value!r}'):
        build(cfg)


def test_a_stale_cache_is_refused(videos, tmp_path):
    """Other bytes under the same name are refused; the same bytes with a
    new modification time (a dataset copied again) reuse the cache."""
    cfg = dataset_cfg(videos, str(tmp_path / 'cache'))
    dataset = build(cfg)
    name = dataset.get_data_info(2)['filename']
    stat = os.stat(name)
    os.utime(name, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    clip = build(cfg).frame_cache.clip(name)
    assert clip['stat'] == [stat.st_size, stat.st_mtime_ns + 10**9]
    other = dataset.get_data_info(1)['filename']
    shutil.copyfile(other, name)
    with pytest.raises(ValueError, match=f'is stale: {name} changed'):
        build(cfg)


def test_a_cache_of_another_pipeline_is_refused(videos, tmp_path):
    build(dataset_cfg(videos, str(tmp_path / 'cache')))
    cfg = dataset_cfg(videos, str(tmp_path / 'cache'))
    cfg.pipeline[3] = dict(type='Resize', scale=(-1, 48))
    with pytest.raises(ValueError, match=r'holds other frames: resize '):
        build(cfg)
    # How the file is opened or decoded in threads changes no frame.
    cfg = dataset_cfg(videos, str(tmp_path / 'cache'))
    cfg.pipeline[0] = dict(type='DecordInit', num_threads=2)
    assert build(cfg).frame_cache.clips


def test_an_interrupted_fill_is_not_trusted(videos, tmp_path, monkeypatch):
    from mmext.multigrid import frame_cache
    cached = build(dataset_cfg(videos, str(tmp_path / 'cache')))
    name = cached.get_data_info(0)['filename']
    fresh = np.array(cached.frame_cache.frames(name))
    path = osp.join(cached.frame_cache.cache_dir,
                    cached.frame_cache.clip(name)['file'])
    os.remove(path)

    def killed(path, frames):  # half the file written, then the end
        with open(path, 'wb') as f:
            np.save(f, frames)
            f.truncate(frames.nbytes // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(frame_cache, '_save', killed)
    with pytest.raises(KeyboardInterrupt):
        cached.frame_cache.frames(name)
    assert os.listdir(cached.frame_cache.cache_dir) == ['manifest.json']
    # A file cut short by anything else (a full disk) is decoded again.
    with open(path, 'wb') as f:
        np.save(f, fresh)
        f.truncate(fresh.nbytes // 2)
    monkeypatch.undo()
    misses = cached.frame_cache.misses
    np.testing.assert_array_equal(cached.frame_cache.frames(name), fresh)
    assert cached.frame_cache.misses == misses + 1


def test_an_unreadable_clip_is_named_when_loaded(videos, tmp_path):
    cfg = dataset_cfg(videos, str(tmp_path / 'cache'))
    plain = build(dataset_cfg(videos))
    name = plain.get_data_info(1)['filename']
    with open(name, 'wb') as f:
        f.write(b'not a video')
    cached = build(cfg)
    mg = multigrid(cached, [Config.fromfile(DEMO_CONFIG).train_pipeline])
    with pytest.raises(BrokenClipError, match=f'Cannot load clip {name} '
                       r'\(index 1\)'):
        mg[1]
    # Without the hook the clip is named too.
    with pytest.raises(RuntimeError, match=f'{name} cannot be decoded: '):
        cached[1]


@pytest.mark.parametrize('missing', ['DecordInit', 'DecordDecode'])
def test_a_pipeline_without_decord_is_refused(videos, tmp_path, missing):
    cfg = dataset_cfg(videos, str(tmp_path / 'cache'))
    cfg.pipeline = [t for t in cfg.pipeline if t['type'] != missing]
    with pytest.raises(ValueError, match=f'CachedVideoDataset needs one '
                       f'{missing} in its pipeline, got 0'):
        build(cfg)


def test_frames_are_kept_at_the_decoded_size_without_a_resize(tmp_path,
                                                              videos):
    cfg = dataset_cfg(videos, str(tmp_path / 'cache'))
    cfg.pipeline = [t for t in cfg.pipeline if t['type'] != 'Resize']
    cached = build(cfg)
    clip = cached.frame_cache.clip(cached.get_data_info(0)['filename'])
    assert clip['shape'][:2] == clip['raw_shape']
    assert isinstance(cached.frame_cache, FrameCache)


def test_fill_before_training(videos, tmp_path):
    """fill decodes what is not cached yet; the loads then all hit."""
    cached = build(dataset_cfg(videos, str(tmp_path / 'cache')))
    names = [cached.get_data_info(i)['filename'] for i in range(len(cached))]
    clips(cached, 2)
    assert cached.frame_cache.fill(names) == len(names) - 2
    assert cached.frame_cache.fill(names) == 0
    cached.frame_cache.reset_counts()
    clips(cached, 4)
    assert (cached.frame_cache.hits, cached.frame_cache.misses) == (4, 0)


def test_the_default_cache_dir_names_the_list(videos, tmp_path,
                                              monkeypatch):
    """Under work_dirs/frame_cache of the working folder, named after the
    list's folder and name, data_root joined."""
    monkeypatch.chdir(tmp_path)
    cfg = dataset_cfg(videos, data_root=videos, ann_file='train.txt')
    cfg.type = 'mmext.CachedVideoDataset'
    cached = build(cfg)
    folder = cached.frame_cache.cache_dir
    assert osp.dirname(folder) == osp.join('work_dirs', 'frame_cache')
    assert osp.basename(folder).startswith('video_train_')
    assert osp.isfile(osp.join(tmp_path, folder, 'manifest.json'))
    # The same list through another pipeline (validating on the train
    # list) gets a folder of its own.
    cfg.pipeline[3] = dict(type='Resize', scale=(-1, 48))
    assert build(cfg).frame_cache.cache_dir != folder


def test_one_video_by_two_paths_is_cached_once(videos, tmp_path):
    """The manifest keys the real path: a list read through a symbolic
    link (another data_root) reuses the frames."""
    cache = str(tmp_path / 'cache')
    first = build(dataset_cfg(videos, cache))
    clips(first, 2)
    link = str(tmp_path / 'link')
    os.symlink(videos, link)
    second = build(dataset_cfg(link, cache))
    assert len(second.frame_cache.clips) == len(first)
    clips(second, 2)
    assert (second.frame_cache.hits, second.frame_cache.misses) == (2, 0)


def test_a_read_only_cache_serves(videos, tmp_path):
    cache = str(tmp_path / 'cache')
    cfg = dataset_cfg(videos, cache)
    clips(build(cfg), 2)
    os.chmod(cache, 0o555)  # a complete manifest: nothing to write
    try:
        if os.access(cache, os.W_OK):
            pytest.skip('root writes into a read-only folder here')
        dataset = build(cfg)
        # A clip not stored yet is decoded and served, not stored.
        assert clips(dataset, 3)[2].shape == (1, 3, 16, 56, 56)
        assert (dataset.frame_cache.hits, dataset.frame_cache.misses) == (
            2, 1)
    finally:
        os.chmod(cache, 0o755)


def test_an_unwritable_cache_dir_is_refused(videos):
    cfg = dataset_cfg(videos, '/proc/no-cache-here')
    with pytest.raises(ValueError, match='is not writable .*; set a '
                       'writable cache_dir'):
        build(cfg)
