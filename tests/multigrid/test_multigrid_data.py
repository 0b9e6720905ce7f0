"""mmext.multigrid.data: the shape-aware dataset wrapper (a clip that fails to
decode names its file; ``skip_broken_clips``)."""
import copy

import pytest
from mg_helpers import PIPELINE
from mmengine.dataset import pseudo_collate
from torch.utils.data import DataLoader

import mmext  # noqa: F401
from mmext.multigrid.data import BrokenClipError, MultigridDataset


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
