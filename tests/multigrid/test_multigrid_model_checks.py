"""mmext.multigrid.model_checks: a recognizer checked against a plan before
training."""

import pytest
import torch.nn as nn
from mg_helpers import PIPE, STEP, TINY

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


def test_model_check_names_unsplittable_bn_layers():
    model = _Pooled()
    plan = MultigridPlan(PIPE, 8, 4, [STEP], options=MultigridOptions(
        bn_base_size=4, long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)]))
    with pytest.raises(ValueError) as info:
        check_run(plan, model)
    assert str(info.value) == (
        'Sub-batch BN (bn_base_size=4) splits per-device batches of up to 32 '
        'clips into groups of 4, but cannot split these BN layers, which '
        'would normalise over the whole per-device batch: cls_head.0 '
        "(BatchNorm1d). Only layers of the kinds ['BatchNorm3d', "
        "'SyncBatchNorm', '_BatchNormXd'] (BN3d, SyncBN and SyncBN reverted "
        'without DDP) are split. Use one of those kinds for them, keep them '
        'in eval mode (norm_eval), or set bn_base_size=None to train every '
        'BN layer on the whole per-device batch.')
    # Long-cycle batches 8 x 4 = 32 at most: no splits, no error.
    check_run(MultigridPlan(PIPE, 8, 4, [STEP], options=MultigridOptions(
        bn_base_size=32, long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)])),
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
