"""mmext.multigrid.pipeline: (T, S) read from and rewritten in a train
pipeline."""
import pytest

from mmext.multigrid.pipeline import parse_grid_shape, resize_pipeline

# The I3D Kinetics recipe's train pipeline: base (T, S) = (32, 224).
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


def test_uniform_sample_carries_t():
    """UniFormerV2's recipes sample with UniformSample (whole video)."""
    pipe = [dict(t) for t in PIPE]
    pipe[1] = dict(type='UniformSample', clip_len=8, num_clips=1)
    assert parse_grid_shape(pipe) == (8, 1, 224)
    out = resize_pipeline(pipe, 4, 112)
    assert out[1] == dict(type='UniformSample', clip_len=4, num_clips=1)
    assert out[5]['scale'] == (112, 112)


def test_pipeline_errors():
    with pytest.raises(ValueError, match='SampleFrames'):
        parse_grid_shape([dict(t, type='UniformSample') if t['type'] ==
                          'SampleFrames' else t for t in PIPE] + PIPE[1:2])
    with pytest.raises(ValueError, match='SampleFrames'):
        parse_grid_shape([t for t in PIPE if t['type'] != 'SampleFrames'])
    with pytest.raises(ValueError, match='final fixed-size square crop'):
        parse_grid_shape(PIPE[:4] + [dict(type='RandomResizedCrop')] +
                         PIPE[6:])
