"""mmext.multigrid.data: (T, S) read from and rewritten in a train
pipeline; the shape-aware dataset wrapper (a clip that fails to decode
names its file; ``skip_broken_clips``)."""
import copy

import re

import pytest
from mg_helpers import PIPELINE
from mmengine.dataset import pseudo_collate
from torch.utils.data import DataLoader

import mmext  # noqa: F401
from mmext.multigrid import MultigridPlan
from mmext.multigrid.data import (BrokenClipError, MultigridDataset,
                                  ShortCycleBatchSampler, check_field_of_view,
                                  clips_per_sample, parse_grid_shape,
                                  resize_pipeline)

# The I3D Kinetics recipe's train pipeline: base (T, S) = (32, 224).
I3D_PIPE = [
    dict(type='DecordInit'),
    dict(type='SampleFrames', clip_len=32, frame_interval=2, num_clips=1),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(-1, 256)),
    dict(type='MultiScaleCrop', input_size=224, scales=(1, 0.8)),
    dict(type='Resize', scale=(224, 224), keep_ratio=False),
    dict(type='FormatShape', input_format='NCTHW'),
]


def test_pipeline_rewrite():
    assert parse_grid_shape(I3D_PIPE) == (32, 2, 224)
    out = resize_pipeline(I3D_PIPE, 8, 112)
    assert out[1]['clip_len'] == 8 and out[1]['frame_interval'] == 8
    assert out[3]['scale'] == (-1, 128) and out[4]['input_size'] == 112
    assert out[5]['scale'] == (112, 112)
    assert I3D_PIPE[1]['clip_len'] == 32


def test_uniform_sample_carries_t():
    """UniFormerV2's recipes sample with UniformSample (whole video)."""
    pipe = [dict(t) for t in I3D_PIPE]
    pipe[1] = dict(type='UniformSample', clip_len=8, num_clips=1)
    assert parse_grid_shape(pipe) == (8, 1, 224)
    out = resize_pipeline(pipe, 4, 112)
    assert out[1] == dict(type='UniformSample', clip_len=4, num_clips=1)
    assert out[5]['scale'] == (112, 112)


def test_pipeline_errors():
    with pytest.raises(ValueError, match='has 2 frame samplers'):
        parse_grid_shape([dict(t, type='UniformSample') if t['type'] ==
                          'SampleFrames' else t for t in I3D_PIPE] +
                         I3D_PIPE[1:2])
    with pytest.raises(ValueError, match='needs a SampleFrames or Uniform'):
        parse_grid_shape([t for t in I3D_PIPE
                          if t['type'] != 'SampleFrames'])
    with pytest.raises(ValueError, match=re.escape(
            'pipeline ends with RandomResizedCrop(), no square crop')):
        parse_grid_shape(I3D_PIPE[:4] + [dict(type='RandomResizedCrop')] +
                         I3D_PIPE[6:])
    with pytest.raises(ValueError, match='needs a final square crop'):
        parse_grid_shape(I3D_PIPE[:3] + I3D_PIPE[-1:])


@pytest.mark.parametrize('head, final, fix', [
    ([], dict(type='CenterCrop', crop_size=224), 'add a Resize before it'),
    ([dict(type='Flip')], dict(type='RandomCrop', size=112),
     'add a Resize before it'),
    ([dict(type='Resize', scale=0.5)], dict(type='CenterCrop', crop_size=64),
     'Resize(scale=0.5) is relative: give its scale in pixels, e.g. '
     '(-1, 64).'),
])
def test_a_final_crop_of_the_raw_frame_is_refused_by_name(head, final, fix):
    """A crop of raw (or relatively resized) pixels cannot keep its field of
    view at a smaller S: the plan refuses it before training, naming a
    relative resize as such."""
    pipe = I3D_PIPE[:3] + head + [final, I3D_PIPE[-1]]
    name, side = final['type'], final.get('crop_size', final.get('size'))
    with pytest.raises(ValueError, match=rf'{name}\({side}\) crops the raw '
                       'frame'):
        check_field_of_view(pipe)
    with pytest.raises(ValueError, match=re.escape(fix)):
        MultigridPlan(pipe, 8, 10)


def test_a_random_rescale_scales_with_s():
    """TimeSformer's RandomRescale((256, 320)) then RandomCrop(224): at
    S = 112 both halve, so the crop keeps its share of the frame."""
    pipe = I3D_PIPE[:3] + [dict(type='RandomRescale', scale_range=(256, 320)),
                           dict(type='RandomCrop', size=224), I3D_PIPE[-1]]
    check_field_of_view(pipe)
    out = resize_pipeline(pipe, 16, 112)
    assert out[3]['scale_range'] == (128, 160) and out[4]['size'] == 112


def test_crops_before_the_first_resize_keep_their_size():
    """CenterCrop(240) of the raw frame, then Resize(-1, 256): the 240 is
    raw pixels (kept), the 256 and the multi-scale crop scale by S/S0."""
    pipe = I3D_PIPE[:3] + [dict(type='CenterCrop', crop_size=240)] + (
        I3D_PIPE[3:])
    check_field_of_view(pipe)
    out = resize_pipeline(pipe, 16, 112)
    assert out[3]['crop_size'] == 240 and out[4]['scale'] == (-1, 128)
    assert out[5]['input_size'] == 112 and out[6]['scale'] == (112, 112)


@pytest.mark.parametrize('crop, views', [('ThreeCrop', 3), ('TenCrop', 10)])
def test_multi_view_test_crops_are_refused_by_name(crop, views):
    """Even followed by the final Resize that parses as a crop size."""
    pipe = I3D_PIPE[:4] + [dict(type=crop, crop_size=224)] + I3D_PIPE[5:]
    with pytest.raises(ValueError, match=f'{crop} makes {views} views'):
        parse_grid_shape(pipe)


def test_short_cycle_batches_are_tagged_with_their_shape():
    """PySlowFast's ShortCycleBatchSampler: batch i has size batch_sizes[i
    % 3], its items shape index i % 3; the incomplete last batch drops."""
    sampler = ShortCycleBatchSampler(range(10), [3, 2, 1])
    assert list(sampler) == [[(0, 0), (1, 0), (2, 0)], [(3, 1), (4, 1)],
                             [(5, 2)], [(6, 0), (7, 0), (8, 0)]]
    assert len(sampler) == 4 and sampler.sampler == range(10)


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
    assert str(info.value).startswith(f'Cannot load clip {broken} (index 0): ')
    assert str(info.value).endswith(
        '. Fix the file or set skip_broken_clips=True.')
    assert dataset.skipped_clips == 0


def test_error_reaches_the_main_process_from_a_worker(ann_file):
    ann, broken = ann_file
    loader = DataLoader(_dataset(ann), batch_size=3, num_workers=1,
                        collate_fn=pseudo_collate)
    with pytest.raises(BrokenClipError,
                       match=f'{broken} \\(index 0\\)'):
        next(iter(loader))


def test_skip_warns_and_counts_over_workers(ann_file):
    ann, broken = ann_file
    dataset = _dataset(ann, skip_broken_clips=True)
    with pytest.warns(UserWarning, match=f'Cannot load clip {broken} '
                      r'\(index 0\): .*; skipped'):
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


def test_a_transform_error_is_not_a_broken_clip(ann_file):
    """ThreeCrop before the final Resize of a good clip: the transforms'
    AssertionError stops at once, though broken clips are skipped."""
    from mmaction.datasets import VideoDataset
    ann, _ = ann_file
    pipe = PIPELINE[:3] + [dict(type='ThreeCrop', crop_size=32)] + (
        PIPELINE[3:])
    dataset = MultigridDataset(VideoDataset(ann, pipeline=[], indices=3),
                               [pipe], skip_broken_clips=True)
    with pytest.raises(AssertionError):
        dataset[(1, 0)]
    assert dataset.skipped_clips == 0


def test_refetch_exhausted_names_the_last_file(ann_file):
    ann, broken = ann_file
    dataset = _dataset(ann, num_good=0, max_refetch=2,
                       skip_broken_clips=True)
    with pytest.warns(UserWarning), pytest.raises(
            RuntimeError, match=f'No valid sample after 2 retries '
            f'\\(last: index 0, {broken}\\)'):
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


def test_clips_per_sample(ann_file):
    from mmaction.datasets import VideoDataset
    ann, _ = ann_file
    assert clips_per_sample(VideoDataset(ann, pipeline=[])) == 1
    assert clips_per_sample(_repeat_aug(ann, 3)) == 3


class _Clock:
    """``time`` whose ``perf_counter`` advances 10 ms a call."""
    now = 0.0

    @classmethod
    def perf_counter(cls):
        cls.now += 0.01
        return cls.now


def test_loader_costs_per_transform_over_workers(ann_file, monkeypatch):
    """Each transform takes one tick (10 ms) of the clock per clip, summed
    over the workers; a repeated name gets its position."""
    import mmext.multigrid.data as data_module
    monkeypatch.setattr(data_module, 'time', _Clock)
    ann, _ = ann_file
    dataset = MultigridDataset(_dataset(ann).dataset,
                               [PIPELINE[:4] + PIPELINE[3:]])  # 2 Resizes
    assert dataset.loader_costs() == {}
    loader = DataLoader(copy.deepcopy(dataset), batch_size=1, num_workers=2,
                        collate_fn=pseudo_collate, sampler=[(1, 0), (2, 0)])
    assert len(list(loader)) == 2
    costs = dataset.loader_costs()
    assert list(costs) == ['DecordInit', 'SampleFrames', 'DecordDecode',
                           'Resize', 'Resize#2', 'FormatShape',
                           'PackActionInputs']
    assert all(ms == pytest.approx(10.0) for ms in costs.values())
    dataset.reset_loader_costs()
    assert dataset.loader_costs() == {}
