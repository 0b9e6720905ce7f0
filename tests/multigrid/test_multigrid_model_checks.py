"""mmext.multigrid.model_checks: a recognizer checked against a plan before
training."""

import os.path as osp
import warnings

import pytest
import torch.nn as nn
from mg_helpers import I3D, PIPE, ROOT, STEP, TINY

import mmext  # noqa: F401
from mmext.multigrid import MultigridOptions, MultigridPlan
from mmext.multigrid.model_checks import check_clip_lengths, check_run


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
    with pytest.raises(ValueError) as info:
        check_run(plan, model)
    assert str(info.value) == (
        'Sub-batch BN (bn_base_size=4) splits per-device batches of up to 64 '
        'clips into groups of 4, but cannot split these BN layers, which '
        'would normalise over the whole per-device batch: cls_head.0 '
        "(BatchNorm1d). Only layers of the kinds ['BatchNorm3d', "
        "'SyncBatchNorm', '_BatchNormXd'] (BN3d, SyncBN and SyncBN reverted "
        'without DDP) are split. Use one of those kinds for them, keep them '
        'in eval mode (norm_eval), or set bn_base_size=None to train every '
        'BN layer on the whole per-device batch.')
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
    with pytest.raises(ValueError, match='multiples of its resample_rate'):
        check_clip_lengths(slowfast, [4, 32])
    i3d = ResNet3d(depth=18, pretrained=None, conv1_stride_t=2,
                   pool1_stride_t=2)
    check_clip_lengths(i3d, [8, 32])
    with pytest.raises(ValueError, match='T >= 8'):
        check_clip_lengths(i3d, [4, 32])






def test_plan_check_warns_when_precise_bn_has_nothing_to_update():
    from mmaction.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    from mmext.multigrid import MultigridPlan
    from mmext.multigrid.model_checks import check_run
    init_default_scope('mmaction')
    cfg = Config.fromfile(TINY)
    cfg.model.backbone.norm_eval = True
    # Without the short cycle's S=28 (a 1x1 final map, which warns too).
    cfg.custom_hooks[0].short_cycle = False
    plan = MultigridPlan.from_config(cfg)
    with pytest.warns(UserWarning) as record:
        messages = check_run(plan, MODELS.build(cfg.model))
    assert messages == [
        'precise_bn_iters=2, but no BN layer of the model trains (all are '
        'in eval mode after model.train(), e.g. norm_eval=True): precise '
        'BN has nothing to update and is skipped.'
    ]
    assert [str(w.message) for w in record] == messages


C3D_PIPE = [dict(type='SampleFrames', clip_len=16, frame_interval=1),
            dict(type='Resize', scale=(112, 112), keep_ratio=False)]


def test_a_model_that_cannot_take_the_shapes_is_refused_before_training():
    """C3D's fc6 takes the features of 16 x 112 x 112 clips only; the error
    names the first refused shape, the module, every shape and the fix."""
    from mg_zoo import build
    c3d = build('C3D', 'meta')
    plan = MultigridPlan(C3D_PIPE, 8, 45, options=MultigridOptions(
        bn_base_size=None))
    with pytest.raises(ValueError) as info:
        check_run(plan, c3d, C3D_PIPE)
    assert str(info.value) == (
        'The model cannot take 7 of the 8 grid shapes the multigrid plan '
        'trains (base T=16, S=112): at (B, T, S) = (128, 4, 56) (from epoch '
        '0) the forward pass fails in backbone.pool4 (MaxPool3d): '
        'RuntimeError: Given input size: (512x1x7x7). Calculated output '
        'size: (512x0x3x3). Output size is too small. Refused: (B, T, S) = '
        '(128, 4, 56), (B, T, S) = (64, 4, 79), (B, T, S) = (64, 8, 56), '
        '(B, T, S) = (32, 8, 79), (B, T, S) = (16, 8, 112), (B, T, S) = '
        '(32, 16, 56), (B, T, S) = (16, 16, 79). Accepted: (B, T, S) = (8, '
        '16, 112). Fix: the model takes neither another T nor another S '
        "than the recipe's (T, S) = (16, 112), so multigrid cannot train it "
        '(train the recipe without mmext.MultigridHook). See the '
        'model-family table of docs/en/multigrid.md.')
    temporal = MultigridPlan(C3D_PIPE, 8, 45, options=MultigridOptions(
        bn_base_size=None, short_cycle=False,
        long_cycle_factors=[(0.5, 1), (1, 1)]))
    with pytest.raises(ValueError) as info:
        check_run(temporal, c3d, C3D_PIPE)
    assert str(info.value).endswith(
        'Refused: (B, T, S) = (16, 8, 112). Accepted: (B, T, S) = (8, 16, '
        '112). Fix: long_cycle_factors without [(0.5, 1)] (or '
        'long_cycle=False) and (every refused shape has T != 16). See the '
        'model-family table of docs/en/multigrid.md.')
    spatial = MultigridPlan(C3D_PIPE, 8, 45, options=MultigridOptions(
        bn_base_size=None, long_cycle=False))
    with pytest.raises(ValueError) as info:
        check_run(spatial, c3d, C3D_PIPE)
    assert 'in backbone.fc6 (Linear): RuntimeError: a and b must have same ' \
        'reduction dim, but got [32, 2048] X [8192, 4096]. Refused' in str(
            info.value)
    assert str(info.value).endswith(
        'Fix: short_cycle=False (or short_cycle_factors closer to 1) and '
        '(every refused shape has S != 112). See the model-family table of '
        'docs/en/multigrid.md.')


SMALL_MAP_COST = (
    'Measured cost on the demo (ResNet3d-18, base S=56, short_cycle_factors '
    '0.5/0.707: S=28 gives a 1x1 map): top-1 0.88 +- 0.12 against 1.00 '
    'without multigrid (10 seeds, 24 val clips); the same run at S=33 (2x2) '
    '0.96, long cycle only 0.98 (docs/en/multigrid_accuracy_study.md).')


def _checked(config, options=None, pipeline_edit=None):
    """check_run's warnings for a config (model built without weights)."""
    import torch
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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        messages = check_run(MultigridPlan.from_config(cfg), model,
                             cfg.train_dataloader.dataset.pipeline)
    assert [str(w.message) for w in caught] == messages
    return messages


def test_final_feature_map_below_2x2_warns_with_the_measured_cost():
    """The demo's old short cycle (S=28: 1x1 after ResNet3d-18's stride 32)
    warns; its milder factors (2x2 at S=42) do not."""
    old = _checked(DEMO, dict(short_cycle_factors=[0.5, 0.5**0.5]))
    assert old == [
        'Multigrid shapes with a final feature map below 2x2 (backbone '
        'output, H x W; 2x2 at the base S=56): (B, T, S) = (32, 8, 28): 1x1, '
        '(B, T, S) = (16, 16, 28): 1x1. ' + SMALL_MAP_COST + ' Fix: milder '
        'short_cycle_factors (e.g. [0.75, 0.875]) or short_cycle=False; or a '
        'larger base crop (the paper trains S=224; smallest short-cycle crop '
        '112).']
    assert _checked(DEMO, dict(short_cycle_factors=[0.75, 0.875])) == []
    # The demo as shipped since the study: 0.6/0.707, 2x2 at S=34.
    assert _checked(DEMO) == []
    # A long-cycle shape that small names its long_cycle_factors entry.
    coarse = _checked(DEMO, dict(short_cycle=False, long_cycle_factors=[
        (0.5, 0.5), (1, 1)]))
    assert coarse[0].startswith(
        'Multigrid shapes with a final feature map below 2x2 (backbone '
        'output, H x W; 2x2 at the base S=56): (B, T, S) = (32, 8, 28): 1x1.')
    assert coarse[0].endswith(
        'Fix: long_cycle_factors with larger s than [(0.5, 0.5)]; or a larger '
        'base crop (the paper trains S=224; smallest short-cycle crop 112).')


def test_feature_map_check_on_the_stock_recipes():
    """I3D R50 with its crop set to 56 warns (short-cycle S=28: 1x1); the
    paper's SlowFast recipe (S=224, smallest crop 112: 4x4) does not."""
    def crop_56(pipeline):
        pipeline[5].scale = (56, 56)

    small = _checked(I3D, pipeline_edit=crop_56)
    assert len(small) == 1 and small[0].startswith(
        'Multigrid shapes with a final feature map below 2x2 (backbone '
        'output, H x W; 2x2 at the base S=56): (B, T, S) = (128, 8, 28): '
        '1x1, (B, T, S) = (64, 16, 28): 1x1, (B, T, S) = (32, 32, 28): 1x1. '
        + SMALL_MAP_COST)
    assert _checked(I3D) == []
    assert _checked(SLOWFAST) == []
