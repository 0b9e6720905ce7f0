"""A clip that fails to decode names its file; ``skip_broken_clips``."""
import copy
import logging
import os
import os.path as osp

import pytest
from mmengine.dataset import pseudo_collate
from torch.utils.data import DataLoader

import mmext  # noqa: F401
from mmext.multigrid import MultigridHook
from mmext.multigrid.data import BrokenClipError, MultigridDataset

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(ROOT, 'tests', 'multigrid', 'tiny_mg.py')
PIPELINE = [
    dict(type='DecordInit'),
    dict(type='SampleFrames', clip_len=4, frame_interval=2, num_clips=1),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(32, 32), keep_ratio=False),
    dict(type='FormatShape', input_format='NCTHW'),
    dict(type='PackActionInputs')
]


@pytest.fixture
def ann_file(tmp_path, repo_demo_data):
    """Annotations listing a truncated mp4 first, then good demo clips."""
    video_dir = osp.join(repo_demo_data, 'video')
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


def _dataset(ann, num_good=2, **kwargs):
    from mmaction.datasets import VideoDataset
    from mmengine.registry import init_default_scope
    init_default_scope('mmaction')
    dataset = VideoDataset(ann, pipeline=[], indices=num_good + 1)
    return MultigridDataset(dataset, [PIPELINE], **kwargs)


def test_error_names_file_and_index(ann_file):
    ann, broken = ann_file
    dataset = _dataset(ann)
    assert dataset[(1, 0)]['inputs'].shape == (1, 3, 4, 32, 32)
    with pytest.raises(BrokenClipError) as info:
        dataset[(0, 0)]
    assert str(info.value).startswith(
        f'Cannot load clip {broken} (dataset index 0): ')
    assert str(info.value).endswith(
        'Fix or remove the file, or set skip_broken_clips=True in '
        'MultigridHook to replace broken clips by random other ones.')
    assert dataset.skipped_clips == 0


def test_error_reaches_the_main_process_from_a_worker(ann_file):
    ann, broken = ann_file
    loader = DataLoader(_dataset(ann), batch_size=3, num_workers=1,
                        collate_fn=pseudo_collate)
    with pytest.raises(BrokenClipError,
                       match=f'{broken} \\(dataset index 0\\)'):
        next(iter(loader))


def test_skip_warns_and_counts_over_workers(ann_file):
    ann, broken = ann_file
    dataset = _dataset(ann, skip_broken_clips=True)
    with pytest.warns(UserWarning, match=f'Cannot load clip {broken} '
                      r'\(dataset index 0\): .*; skipped'):
        sample = dataset[(0, 0)]
    assert sample['inputs'].shape == (1, 3, 4, 32, 32)
    assert dataset.skipped_clips == 1
    dataset.reset_skipped()
    # Runner.build_dataloader deep-copies the dataset: the copy counts into
    # the same shared counter, from every worker process.
    loader = DataLoader(copy.deepcopy(dataset), batch_size=3, num_workers=2,
                        collate_fn=pseudo_collate)
    for epoch in range(2):
        batches = list(loader)
        assert len(batches) == 1 and len(batches[0]['inputs']) == 3
        assert dataset.skipped_clips == 1
        dataset.reset_skipped()


def test_skip_option_is_validated():
    with pytest.raises(ValueError, match='skip_broken_clips must be True or '
                       "False, got 'yes'"):
        MultigridHook(skip_broken_clips='yes')


def test_hook_logs_skipped_clips_per_epoch(ann_file, tmp_path):
    from mmext.cli import build_runner, load_run_config
    ann, broken = ann_file
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(
        custom_hooks=[dict(type='mmext.MultigridHook',
                           long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                           bn_base_size=4, precise_bn_iters=0,
                           skip_broken_clips=True)],
        train_dataloader=dict(
            sampler=dict(type='DefaultSampler', shuffle=False),
            dataset=dict(ann_file=ann, data_prefix=dict(video='')))),
        str(tmp_path / 'work'))
    runner = build_runner(cfg)
    # What Runner.train() builds before its before_run hooks.
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    runner.param_schedulers = runner.build_param_scheduler(
        runner.param_schedulers)
    runner.call_hook('before_run')
    hook = [h for h in runner.hooks if isinstance(h, MultigridHook)][0]
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    runner.logger.addHandler(handler)
    try:
        hook.before_train_epoch(runner)
        with pytest.warns(UserWarning, match=str(broken)):
            # Unshuffled, index 0 is in the first batch.
            next(iter(runner.train_loop.dataloader))
        hook.after_train_epoch(runner)
        hook.after_train_epoch(runner)  # nothing skipped since
    finally:
        runner.logger.removeHandler(handler)
    messages = [r.getMessage() for r in records
                if 'broken' in r.getMessage()]
    assert messages == [
        'Multigrid: epoch 0 skipped 1 broken clips (skip_broken_clips=True; '
        'the warnings name the files)'
    ]
    assert records[[r.getMessage() for r in records].index(
        messages[0])].levelno == logging.WARNING


def test_refetch_exhausted_names_the_last_file(ann_file):
    ann, broken = ann_file
    dataset = _dataset(ann, num_good=0, max_refetch=2,
                       skip_broken_clips=True)
    with pytest.warns(UserWarning), pytest.raises(
            RuntimeError, match=f'Cannot find a valid sample after 2 '
            f'retries \\(last: dataset index 0, {broken}\\)'):
        dataset[(0, 0)]
    assert dataset.skipped_clips == 3
