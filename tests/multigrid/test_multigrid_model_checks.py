"""mmext.multigrid.model_checks: a recognizer checked against a plan before
training."""

import pytest
import torch.nn as nn
from mg_helpers import PIPE, STEP, TINY

import mmext  # noqa: F401
from mmext.multigrid import MultigridOptions, MultigridPlan
from mmext.multigrid.model_checks import check_clip_lengths, check_run


def test_model_check_names_unsplittable_bn_layers():
    model = nn.Module()
    model.backbone = nn.Sequential(nn.BatchNorm3d(2))
    model.cls_head = nn.Sequential(nn.BatchNorm1d(2))
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
    plan = MultigridPlan.from_config(cfg)
    with pytest.warns(UserWarning) as record:
        messages = check_run(plan, MODELS.build(cfg.model))
    assert messages == [
        'precise_bn_iters=2, but no BN layer of the model trains (all are '
        'in eval mode after model.train(), e.g. norm_eval=True): precise '
        'BN has nothing to update and is skipped.'
    ]
    assert [str(w.message) for w in record] == messages
