"""Multigrid tensors follow the model's device: precise BN across ranks and
the hook's LR scaling."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper

from mmext.multigrid import MultigridHook, MultigridPlan
from mmext.multigrid.bn import update_precise_bn
from mmext.testing import run_gloo_processes

PIPE = [
    dict(type='SampleFrames', clip_len=16, frame_interval=2, num_clips=1),
    dict(type='Resize', scale=(56, 56), keep_ratio=False),
]


class _FrozenFirst(nn.Sequential):
    """Keeps its first BN in eval mode, as ``frozen_stages`` does."""

    def train(self, mode=True):
        super().train(mode)
        self[0].eval()
        return self


def _precise_bn_rank(rank, world_size, out):
    net = _FrozenFirst(nn.BatchNorm3d(1), nn.BatchNorm3d(1))
    with torch.no_grad():
        net[0].running_mean.fill_(float(rank + 7))  # rank-specific, frozen
    # The frozen BN gives (x - (rank + 7)) / sqrt(1 + eps): rank 0 inputs
    # {8, 10} -> {1, 3}, rank 1 inputs {30, 34} -> {22, 26}; batch means 2 /
    # 24, unbiased variances 2 / 8 (times the eps scale).
    values = [[8., 10.], [30., 34.]][rank]
    batches = [torch.tensor(values).view(2, 1, 1, 1, 1)]
    assert update_precise_bn(net, batches, net) == 1
    out[rank] = (net[0].running_mean.item(), net[1].running_mean.item(),
                 net[1].running_var.item())


def test_precise_bn_averages_trained_layers_across_ranks():
    with torch.multiprocessing.Manager() as manager:
        shared = manager.dict()
        run_gloo_processes(_precise_bn_rank, 2, (shared, ), timeout=120)
        out = dict(shared)
    eps_scale = (1 + 1e-5)**-0.5
    for rank in range(2):
        frozen, mean, var = out[rank]
        assert frozen == rank + 7.  # neither reset nor averaged
        assert mean == pytest.approx((2. + 24.) / 2 * eps_scale, rel=1e-6)
        assert var == pytest.approx((2. + 8.) / 2 * eps_scale**2, rel=1e-5)


def test_hook_lr_scaling_keeps_tensor_lrs_on_their_device():
    """A tensor LR (e.g. capturable optimizers) stays on its device."""
    param = nn.Parameter(torch.zeros(2, device='meta'))
    lr = torch.tensor(0.1, device='meta')
    optimizer = torch.optim.SGD([param], lr=0.1)
    optimizer.param_groups[0]['lr'] = lr  # SGD's own check calls .item()
    runner = SimpleNamespace(epoch=0, optim_wrapper=OptimWrapper(optimizer))
    hook = MultigridHook(long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)])
    hook.plan = MultigridPlan(
        PIPE, 4, 4, [dict(type='MultiStepLR', milestones=[2])],
        options=hook.options)
    assert hook.plan.stage_at(0).shape.batch_factor == 4
    hook.before_train_iter(runner, 0)
    scaled = optimizer.param_groups[0]['lr']
    assert torch.is_tensor(scaled) and scaled.device.type == 'meta'
    hook.after_train_iter(runner, 0)
    assert optimizer.param_groups[0]['lr'] is lr
