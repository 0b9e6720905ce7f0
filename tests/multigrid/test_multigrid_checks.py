"""mmext.multigrid.checks: a recognizer checked against a plan before
training; every planned grid shape tried on the model (meta device,
tiny-batch fallback), the final feature map recorded."""
import os.path as osp
import re
import warnings

import pytest
import torch
import torch.nn as nn
from mg_helpers import I3D, PIPE, ROOT, STEP
from mg_zoo import FAMILIES, base_shape, build

import mmext  # noqa: F401
from mmext.multigrid import MultigridOptions, MultigridPlan
from mmext.multigrid.checks import (PlannedShape, check_clip_lengths,
                                    check_run, meta_copy, planned_shapes,
                                    probe_input_size, probe_shapes)
from mmext.multigrid.transformers import install_shape_adapters


class _Pooled(nn.Module):
    """A recognizer stand-in: BN3d backbone, BN1d head, any input size."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.BatchNorm3d(3))
        self.cls_head = nn.Sequential(nn.BatchNorm1d(3))

    def forward(self, inputs, mode, stage):
        x = self.backbone(inputs.flatten(0, 1))
        return self.cls_head(x.mean((2, 3, 4)))


DEMO = osp.join(ROOT, 'configs', 'demo',
                'recognizer3d_r18_multigrid_demo-video.py')
SLOWFAST = osp.join(ROOT, 'configs', 'multigrid',
                    'slowfast_r50_multigrid_8xb8-8x8x1-steplr-239e_'
                    'kinetics400-rgb.py')


def test_model_check_names_unsplittable_bn_layers():
    model = _Pooled()
    plan = MultigridPlan(PIPE, 8, 4, [STEP], options=MultigridOptions(
        bn_base_size=4, long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)]))
    with pytest.raises(ValueError, match=re.escape(
            'bn_base_size=4 cannot split cls_head.0 (BatchNorm1d)')):
        check_run(plan, model)
    # Short-cycle batches 8 x 4 x 2 = 64 at most: no splits, no error.
    check_run(MultigridPlan(PIPE, 8, 4, [STEP], options=MultigridOptions(
        bn_base_size=64, long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)])),
        model)


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
    with pytest.raises(ValueError, match=r'resample_rate=8, got T=\[4\]'):
        check_clip_lengths(slowfast, [4, 32])
    i3d = ResNet3d(depth=18, pretrained=None, conv1_stride_t=2,
                   pool1_stride_t=2)
    check_clip_lengths(i3d, [8, 32])
    with pytest.raises(ValueError, match=r'ResNet3d needs T >= 8, got '
                       r'T=\[4\]'):
        check_clip_lengths(i3d, [4, 32])


C3D_PIPE = [dict(type='SampleFrames', clip_len=16, frame_interval=1),
            dict(type='Resize', scale=(112, 112), keep_ratio=False)]


def test_a_model_that_cannot_take_the_shapes_is_refused_before_training():
    """C3D's fc6 takes the features of 16 x 112 x 112 clips only; the error
    names the first refused shape, the module, every shape and the fix."""
    c3d = build('C3D', 'meta')
    plan = MultigridPlan(C3D_PIPE, 8, 45, options=MultigridOptions(
        bn_base_size=None))
    with pytest.raises(ValueError) as info:
        check_run(plan, c3d, C3D_PIPE)
    message = str(info.value)
    assert message.startswith('The model refuses 7 of 8 shapes, e.g. ')
    assert '(128, 4, 56) in backbone.pool4 (MaxPool3d): Runtime' in message
    assert message.endswith('. Fix: train without MultigridHook.')
    temporal = MultigridPlan(C3D_PIPE, 8, 45, options=MultigridOptions(
        bn_base_size=None, short_cycle=False,
        long_cycle_factors=[(0.5, 1), (1, 1)]))
    with pytest.raises(ValueError) as info:
        check_run(temporal, c3d, C3D_PIPE)
    message = str(info.value)
    assert message.startswith('The model refuses 1 of 2 shapes, e.g. ')
    assert 'Fix: long_cycle_factors without [(0.5, 1)] and ' in message
    assert message.endswith('(all refused have T != 16).')
    spatial = MultigridPlan(C3D_PIPE, 8, 45, options=MultigridOptions(
        bn_base_size=None, long_cycle=False))
    with pytest.raises(ValueError) as info:
        check_run(spatial, c3d, C3D_PIPE)
    message = str(info.value)
    assert 'in backbone.fc6 (Linear): RuntimeError: a and b must ' in message
    assert message.endswith(
        'Fix: short_cycle=False and (all refused have S != 112).')


SMALL_MAP = 'Final feature maps below 2x2 lose accuracy: '


def _checked(config, options=None, pipeline_edit=None):
    """check_run's warnings for a config (model built without weights)."""
    from mmaction.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    init_default_scope('mmaction')
    cfg = Config.fromfile(config)
    cfg.custom_hooks[0].update(options or {})
    if pipeline_edit:
        pipeline_edit(cfg.train_dataloader.dataset.pipeline)
    cfg.model.backbone.pretrained = None
    with torch.device('meta'):
        model = MODELS.build(cfg.model)
    # Built first: options that do nothing (short-cycle factors with
    # short_cycle=False) warn here, not in check_run.
    plan = MultigridPlan.from_config(cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        messages = check_run(plan, model,
                             cfg.train_dataloader.dataset.pipeline).warnings
    assert [str(w.message) for w in caught] == messages
    return messages


def test_final_feature_map_below_2x2_warns_with_the_measured_cost():
    """The demo's old short cycle (S=28: 1x1 after ResNet3d-18's stride 32)
    warns; its milder factors (2x2 at S=42) do not."""
    both = dict(short_cycle=True)
    [old] = _checked(DEMO, dict(both, short_cycle_factors=[0.5, 0.5**0.5]))
    assert old.startswith(SMALL_MAP + '(B, T, S) = (32, 8, 28): 1x1, ')
    assert '(16, 16, 28): 1x1. Use short_cycle_factors closer' in old
    assert old.endswith(' to 1, or a larger crop.')
    assert _checked(DEMO, dict(both, short_cycle_factors=[0.75, 0.875])) == []
    # The demo's factors since the study (0.6/0.707, 2x2 at S=34) with both
    # cycles, and the demo as shipped (the long cycle alone).
    assert _checked(DEMO, dict(both, short_cycle_factors=[0.6, 0.5**0.5]))\
        == []
    assert _checked(DEMO) == []
    # A long-cycle shape that small names its long_cycle_factors entry.
    coarse = _checked(DEMO, dict(short_cycle=False, long_cycle_factors=[
        (0.5, 0.5), (1, 1)]))
    assert coarse[0].startswith(SMALL_MAP + '(B, T, S) = (32, 8, 28): 1x1.')
    assert 'Use larger s than [(0.5, 0.5)] in long_cycle_factors' in coarse[0]


def test_feature_map_check_on_the_stock_recipes():
    """I3D R50 with its crop set to 56 warns (short-cycle S=28: 1x1); the
    paper's SlowFast recipe (S=224, smallest crop 112: 4x4) does not."""
    def crop_56(pipeline):
        pipeline[5].scale = (56, 56)

    small = _checked(I3D, pipeline_edit=crop_56)
    assert len(small) == 1 and small[0].startswith(
        SMALL_MAP + '(B, T, S) = (128, 8, 28): 1x1, ')
    assert '(64, 16, 28): 1x1, (B, T, S) = (32, 32, 28): 1x1. Use' in small[0]
    assert _checked(I3D) == []
    assert _checked(SLOWFAST) == []


def test_flop_saving_counted_on_the_slowfast_reference():
    """Forward FLOPs per clip counted on a meta copy of SlowFast R50: the
    saving is 3.34x with the short cycle (B T S^2 estimate 3.43x), 2.16x
    without (2.18x); 100.6 GFLOPs per clip at the base (T, S) = (32, 224).
    """
    from mmaction.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    init_default_scope('mmaction')
    cfg = Config.fromfile(SLOWFAST)
    cfg.model.backbone.pretrained = None
    with torch.device('meta'):
        model = MODELS.build(cfg.model)
    for short_cycle, saving, estimate in ((True, 3.34, 3.43),
                                          (False, 2.16, 2.18)):
        cfg.custom_hooks[0].short_cycle = short_cycle
        plan = MultigridPlan.from_config(cfg)
        assert round(1 / plan.flops_ratio(), 2) == estimate
        flops = check_run(plan, model,
                          cfg.train_dataloader.dataset.pipeline).clip_flops
        assert plan.clip_flops is None  # the check returns, the caller sets
        plan.clip_flops = flops
        assert plan.flops_counted and len(flops) == (8 if short_cycle else 4)
        assert round(1 / plan.flops_ratio(), 2) == saving
    assert round(plan.clip_flops[32, 224] / 1e9, 1) == 100.6
    # Half the frames, half the FLOPs (both pathways scale with T).
    assert plan.clip_flops[16, 224] == pytest.approx(
        plan.clip_flops[32, 224] / 2, rel=0.01)


TWO = MultigridOptions(long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                       bn_base_size=None)


def test_planned_shapes_are_the_distinct_short_cycle_shapes():
    # Base (B, T, S) = (4, 16, 56); long cycle (8, 40) in epochs 0-3, then
    # (16, 56) in 3-4 and the fine-tune 4-6; short cycle S = 28, 40.
    plan = MultigridPlan(PIPE, 4, 4, [STEP], options=TWO)
    assert [tuple(s) for s in planned_shapes(plan)] == [
        (32, 8, 28, False),  # B x T0 S0^2 / (T S^2), rounded
        (16, 8, 40, True),
        (16, 16, 28, False),
        (8, 16, 40, False),
        (4, 16, 56, True),
    ]
    assert str(planned_shapes(plan)[0]) == '(B, T, S) = (32, 8, 28)'


def test_probe_input_size_follows_the_data_layout():
    i3d, tsm = build('ResNet3d', 'meta'), build('TSM', 'meta')
    assert probe_input_size(i3d, 4, 16, 112) == (4, 1, 3, 16, 112, 112)
    tsm_pipe = [dict(type='SampleFrames', clip_len=1, num_clips=8)]
    assert probe_input_size(tsm, 4, 1, 112, tsm_pipe) == (4, 8, 3, 112, 112)


def test_meta_copy_leaves_the_model_alone():
    model = build('ResNet3d')
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ghost = meta_copy(model)
    assert {p.device.type for p in ghost.parameters()} == {'meta'}
    assert {b.device.type for b in ghost.buffers()} == {'meta'}
    assert [n for n, _ in ghost.named_parameters()] == [
        n for n, _ in model.named_parameters()]
    shape = PlannedShape(8, 8, 112, True)
    [result] = probe_shapes(model, [shape])
    assert result.error is None and result.device == 'meta'
    assert all(torch.equal(v, before[k])
               for k, v in model.state_dict().items())
    assert {p.device.type for p in model.parameters()} == {'cpu'}


def _plan(family, **options):
    t, s = base_shape(family)
    pipe = [dict(type='SampleFrames', clip_len=t, frame_interval=2,
                 num_clips=8 if family == 'TSM' else 1),
            dict(type='Resize', scale=(s, s), keep_ratio=False)]
    defaults = dict(bn_base_size=None)
    if family == 'TSM':
        # A 2D recognizer's T is 1 frame per segment: spatial cycles only.
        defaults['long_cycle_factors'] = [(1, 0.5**0.5), (1, 1)]
    return MultigridPlan(pipe, 8, 100, options=MultigridOptions(
        **dict(defaults, **options))), pipe


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_every_family_at_the_default_multigrid_shapes(family):
    """The paper's default cycles on each family of the zoo, built tiny:
    all shapes pass but C3D's (fixed fc6 input), after the transformers
    got their shape adapters."""
    model = build(family, 'meta' if family == 'C3D' else 'cpu')
    install_shape_adapters(model)
    plan, pipe = _plan(family)
    results = probe_shapes(model, planned_shapes(plan), pipe)
    assert len(results) == len(planned_shapes(plan)) >= 3
    assert {r.device for r in results} == {'meta'}
    refused = [r for r in results if r.error]
    if family != 'C3D':
        assert refused == []
        return
    # Only the recipe's (16, 112) passes: short clips end in a pooling
    # layer, 16-frame clips of other crops in fc6.
    assert [(r.shape.clip_len, r.shape.crop_size) for r in results
            if not r.error] == [(16, 112)]
    assert {r.module for r in refused if r.shape.clip_len == 16} == {
        'backbone.fc6 (Linear)'}
    assert {r.module for r in refused if r.shape.clip_len < 16} <= {
        'backbone.pool4 (MaxPool3d)', 'backbone.pool5 (MaxPool3d)'}


@pytest.mark.parametrize('family', ['TimeSformer', 'VisionTransformer',
                                    'UniFormerV2'])
def test_transformers_without_adapters_are_refused(family):
    model = build(family)
    plan, pipe = _plan(family)
    results = probe_shapes(model, planned_shapes(plan), pipe)
    base = base_shape(family)
    passed = {(r.shape.clip_len, r.shape.crop_size) for r in results
              if not r.error}
    assert base in passed
    refused = [r for r in results if r.error]
    assert refused and {r.module for r in refused} == {
        f'backbone ({family})'}
    assert all(r.error.startswith('RuntimeError: ') for r in refused)


def test_final_feature_map_sizes():
    """ResNet3d (total stride 32): 28 -> 1, 40 -> 2 (ceil), 56 -> 2,
    224 -> 7; SlowFast gives its pathways' map; transformers none."""
    model = build('ResNet3d')
    shapes = [PlannedShape(4, 16, s, True) for s in (28, 40, 56, 224)]
    assert [r.feature_map for r in probe_shapes(model, shapes)] == [
        (1, 1), (2, 2), (2, 2), (7, 7)]
    [slowfast] = probe_shapes(build('SlowFast'), shapes[-1:])
    assert slowfast.feature_map == (7, 7)
    vit = build('VisionTransformer')
    [tokens] = probe_shapes(vit, [PlannedShape(2, 16, 224, True)])
    assert tokens.error is None and tokens.feature_map is None


class _NeedsData(nn.Module):
    """Reads a value of its input (no meta kernel can): takes only T=4."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv3d(3, 2, 1), nn.BatchNorm3d(2))
        self.cls_head = nn.Linear(2 * 4, 3)

    def forward(self, inputs, mode, stage):
        x = self.backbone(inputs.flatten(0, 1))
        scale = 1 + 0 * x.abs().max().item()
        return self.cls_head(x.mean((3, 4)).flatten(1) * scale)


def test_data_dependent_forward_falls_back_to_a_tiny_batch():
    model = _NeedsData().train()
    model.backbone[1].eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    results = probe_shapes(model, [PlannedShape(64, 4, 16, True),
                                   PlannedShape(64, 2, 16, True)])
    assert [r.device for r in results] == ['cpu', 'cpu']
    assert results[0].error is None and results[0].feature_map == (16, 16)
    # Per clip: Conv3d 2 x (3 x 2) x 4 x 16 x 16, Linear 2 x 8 x 3.
    assert (results[0].flops, results[1].flops) == (12288 + 48, None)
    assert results[1].module == 'cls_head (Linear)'
    assert results[1].error.startswith('RuntimeError: mat1 and mat2')
    # Modes restored, no statistic or weight changed.
    assert model.training and not model.backbone[1].training
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
