"""Precise BN averaging and the pre-training checks (sub-batch BN: see
test_multigrid_bn_kinds.py)."""
import pytest
import torch
import torch.nn as nn

from mmext.multigrid.model_checks import check_clip_lengths
from mmext.multigrid.bn import update_precise_bn
from mmext.multigrid.pipeline import parse_grid_shape, resize_pipeline


def test_precise_bn_is_exact_average():
    net = nn.Sequential(nn.BatchNorm3d(1))
    batches = [torch.full((2, 1, 1, 1, 1), v) + torch.tensor(
        [-1., 1.]).view(2, 1, 1, 1, 1) for v in (0., 10., 20.)]
    assert update_precise_bn(net, batches, net) == 3
    assert net[0].running_mean.item() == pytest.approx(10.)
    assert net[0].running_var.item() == pytest.approx(2.)  # unbiased var
    assert net[0].momentum == 0.1


PIPE = [
    dict(type='DecordInit'),
    dict(type='SampleFrames', clip_len=32, frame_interval=2, num_clips=1),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(-1, 256)),
    dict(type='MultiScaleCrop', input_size=224, scales=(1, 0.8)),
    dict(type='Resize', scale=(224, 224), keep_ratio=False),
    dict(type='FormatShape', input_format='NCTHW'),
]


def test_pipeline_rewrite():
    assert parse_grid_shape(PIPE) == (32, 2, 224)
    out = resize_pipeline(PIPE, 8, 112)
    assert out[1]['clip_len'] == 8 and out[1]['frame_interval'] == 8
    assert out[3]['scale'] == (-1, 128) and out[4]['input_size'] == 112
    assert out[5]['scale'] == (112, 112)
    assert PIPE[1]['clip_len'] == 32


def test_pipeline_errors():
    with pytest.raises(ValueError, match='SampleFrames'):
        parse_grid_shape([t for t in PIPE if t['type'] != 'SampleFrames'])
    with pytest.raises(ValueError, match='final fixed-size square crop'):
        parse_grid_shape(PIPE[:4] + [dict(type='RandomResizedCrop')] +
                         PIPE[6:])


def test_clip_length_errors():
    from mmaction.models.backbones import ResNet3d, ResNet3dSlowFast
    slowfast = ResNet3dSlowFast(
        resample_rate=8, speed_ratio=8,
        slow_pathway=dict(type='resnet3d', depth=18, pretrained=None,
                          lateral=True, conv1_kernel=(1, 7, 7),
                          inflate=(0, 0, 1, 1)),
        fast_pathway=dict(type='resnet3d', depth=18, pretrained=None,
                          lateral=False, base_channels=8,
                          conv1_kernel=(5, 7, 7)))
    check_clip_lengths(slowfast, [8, 16, 32])
    with pytest.raises(ValueError, match='multiples of its resample_rate'):
        check_clip_lengths(slowfast, [4, 32])
    i3d = ResNet3d(depth=18, pretrained=None, conv1_stride_t=2,
                   pool1_stride_t=2)
    check_clip_lengths(i3d, [8, 32])
    with pytest.raises(ValueError, match='T >= 8'):
        check_clip_lengths(i3d, [4, 32])
