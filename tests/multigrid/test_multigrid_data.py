"""mmext.multigrid.data: the shape-aware dataset wrapper (a clip that fails to
decode names its file; ``skip_broken_clips``)."""
import copy

import pytest
from mg_helpers import PIPELINE
from mmengine.dataset import pseudo_collate
from torch.utils.data import DataLoader

import mmext  # noqa: F401
from mmext.multigrid.data import (BrokenClipError, MultigridDataset,
                                  clips_per_sample)


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






def test_refetch_exhausted_names_the_last_file(ann_file):
    ann, broken = ann_file
    dataset = _dataset(ann, num_good=0, max_refetch=2,
                       skip_broken_clips=True)
    with pytest.warns(UserWarning), pytest.raises(
            RuntimeError, match=f'Cannot find a valid sample after 2 '
            f'retries \\(last: dataset index 0, {broken}\\)'):
        dataset[(0, 0)]
    assert dataset.skipped_clips == 3


def _repeat_aug(ann, repeats):
    from mmaction.datasets import RepeatAugDataset
    from mmengine.registry import init_default_scope
    init_default_scope('mmaction')
    return RepeatAugDataset(ann, pipeline=PIPELINE, num_repeats=repeats,
                            indices=3)


def test_repeat_aug_dataset_gives_its_clips_at_each_shape(ann_file):
    """RepeatAugDataset under the short cycle: one decode, num_repeats
    clips of the iteration's shape per index, flattened by its collate."""
    from mmaction.datasets.repeat_aug_dataset import repeat_pseudo_collate

    from mmext.multigrid.pipeline import resize_pipeline
    ann, _ = ann_file
    wrapped = _repeat_aug(ann, 3)
    assert clips_per_sample(wrapped) == 3
    label = wrapped.get_data_info(1)['label']
    dataset = MultigridDataset(wrapped, [resize_pipeline(PIPELINE, 2, 16),
                                         PIPELINE])
    for shape, size in ((0, (1, 3, 2, 16, 16)), (1, (1, 3, 4, 32, 32))):
        clips = dataset[(1, shape)]
        assert [c['inputs'].shape for c in clips] == [size] * 3
        assert [c['data_samples'].gt_label.item() for c in clips] == [
            label] * 3
    batch = next(iter(DataLoader(dataset, sampler=[(1, 0), (2, 0)],
                                 batch_size=2, num_workers=1,
                                 collate_fn=repeat_pseudo_collate)))
    assert [x.shape for x in batch['inputs']] == [(1, 3, 2, 16, 16)] * 6


def test_clips_per_sample_and_sub_bn_check_of_repeated_clips(ann_file):
    from mg_helpers import PIPE, STEP
    from mmaction.datasets import VideoDataset

    from mmext.multigrid import MultigridOptions, MultigridPlan
    ann, _ = ann_file
    assert clips_per_sample(VideoDataset(ann, pipeline=[])) == 1
    # Base batch 2 videos, bn_base_size 4: every batch of videos splits,
    # and x2 clips, but not x3 (6 clips at the base shape, last stage).
    options = MultigridOptions(bn_base_size=4)
    for clips in (1, 2):
        MultigridPlan(PIPE, 2, 4, [STEP], options=options,
                      clips_per_sample=clips)
    with pytest.raises(ValueError) as info:
        MultigridPlan(PIPE, 2, 4, [STEP], options=options,
                      clips_per_sample=3)
    assert str(info.value) == (
        'Sub-batch BN cannot split per-device batches [24, 12, 6] (3 clips '
        'per video: RepeatAugDataset num_repeats) (epochs 4-5) into groups of '
        'bn_base_size=4. Make 3 x train_dataloader.batch_size a multiple '
        'of bn_base_size or a divisor of it, or change bn_base_size.')
