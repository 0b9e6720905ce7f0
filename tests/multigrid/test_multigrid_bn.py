"""mmext.multigrid.bn: sub-batch BN and precise BN for every BN kind of
mmaction2 recipes, on every device.

Kinds: ``BatchNorm3d`` (``BN3d``), ``SyncBatchNorm`` (``SyncBN``; without a
process group it normalises locally) and mmengine's BatchNormXd (``SyncBN``
after ``revert_sync_batchnorm``).
"""

import pytest
import torch
import torch.nn as nn
from helpers import DEVICES
from mg_helpers import STATS, bn_layers, load_random_stats
from mmaction.models.backbones import ResNet3d
from mmaction.models.common import SubBatchNorm3D

from mmext.compat import batch_norm_xd_type
from mmext.multigrid.bn import (aggregate_sub_bn_stats, set_sub_bn_splits,
                                to_plain_bn_state_dict, unsplittable_bn_layers,
                                update_precise_bn)
from mmext.testing import run_gloo_processes

KINDS = [nn.BatchNorm3d, nn.SyncBatchNorm, batch_norm_xd_type()]


def _net(kind, device='cpu', dtype=torch.float32):
    net = nn.Sequential(nn.Identity(), kind(2, momentum=None))
    with torch.no_grad():
        net[1].weight.copy_(torch.tensor([2., 3.]))
        net[1].bias.copy_(torch.tensor([0.5, -1.]))
    return net.to(device, dtype)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', KINDS, ids=lambda k: k.__name__)
def test_two_splits_normalise_and_aggregate_per_split(kind, device):
    net = _net(kind, device)
    weight = net[1].weight
    assert set_sub_bn_splits(net, 2) == 1
    sub = net[1]
    assert isinstance(sub, SubBatchNorm3D) and sub.weight is weight
    assert type(sub.bn) is kind and type(sub.split_bn) is kind
    assert sub.split_bn.num_features == 4
    sub.split_bn.reset_running_stats()
    # SubBatchNorm3D views (N, C) as (N / 2, 2 C): sample i is in split
    # i mod 2. Channel 0: split 0 {1, 3}, split 1 {5, 7}; channel 1: split 0
    # {0, 4}, split 1 {10, 14}.
    x = torch.tensor([[1., 0.], [5., 10.], [3., 4.], [7., 14.]],
                     device=device).view(4, 2, 1, 1, 1)
    net.train()
    out = net(x).view(4, 2)
    # Per split: mean, biased variance 1 (ch 0) / 4 (ch 1) for normalising.
    z = torch.tensor([[-1., -1.], [-1., -1.], [1., 1.], [1., 1.]])
    expected = z * torch.tensor([2., 3.]) + torch.tensor([0.5, -1.])
    assert torch.allclose(out.cpu(), expected, atol=1e-4)
    # Running statistics per (split, channel), variances unbiased.
    assert torch.equal(sub.split_bn.running_mean.cpu(),
                       torch.tensor([2., 2., 6., 12.]))
    assert torch.equal(sub.split_bn.running_var.cpu(),
                       torch.tensor([2., 8., 2., 8.]))
    assert aggregate_sub_bn_stats(net) == 1
    # Law of total variance: mean of split variances + variance of means.
    assert torch.equal(sub.bn.running_mean.cpu(), torch.tensor([4., 7.]))
    assert torch.equal(sub.bn.running_var.cpu(),
                       torch.tensor([2. + 4., 8. + 25.]))
    assert sub.bn.running_mean.device.type == device
    # Back to one split: the original kind, Parameter and statistics.
    assert set_sub_bn_splits(net, 1) == 1
    assert type(net[1]) is kind and net[1].weight is weight
    assert torch.equal(net[1].running_var.cpu(), torch.tensor([6., 33.]))


@pytest.mark.parametrize('kind', KINDS, ids=lambda k: k.__name__)
def test_checkpoint_keys_are_the_original_kind(kind):
    net = _net(kind)
    with torch.no_grad():
        net[1].running_mean.copy_(torch.tensor([0.25, -3.]))
    set_sub_bn_splits(net, 4)
    aggregate_sub_bn_stats(net)
    state = net.state_dict()
    to_plain_bn_state_dict(net, state)
    plain = _net(kind)
    plain.load_state_dict(state, strict=True)
    assert torch.equal(plain[1].running_mean, torch.tensor([0.25, -3.]))
    assert torch.equal(plain[1].weight, torch.tensor([2., 3.]))


def test_sync_bn_splits_keep_the_process_group():
    group = object()  # any handle: stored, used only by a distributed pass
    net = nn.Sequential(nn.SyncBatchNorm(2, process_group=group))
    set_sub_bn_splits(net, 2)
    assert net[0].split_bn.process_group is group
    assert net[0].bn.process_group is group
    set_sub_bn_splits(net, 1)
    assert net[0].process_group is group


@pytest.mark.parametrize('kind', KINDS, ids=lambda k: k.__name__)
def test_splitting_on_meta_keeps_device_and_dtype(kind):
    """Every tensor of the swapped modules follows the original's device
    and dtype (no CPU detour)."""
    net = nn.Sequential(nn.Conv3d(3, 2, 1), kind(2)).to('meta', torch.float64)

    def tensors():
        return dict(list(net.named_parameters()) + list(net.named_buffers()))

    set_sub_bn_splits(net, 2)
    assert '1.split_bn.running_mean' in tensors()
    for splits in (2, 4, 1):
        set_sub_bn_splits(net, splits)
        for name, t in tensors().items():
            assert t.device.type == 'meta', name
            expected = torch.int64 if 'num_batches' in name else torch.float64
            assert t.dtype == expected, name


class _Head(nn.Module):
    """A head with a BN1d that a recipe may freeze in its ``train()``."""

    def __init__(self, frozen):
        super().__init__()
        self.bn = nn.BatchNorm1d(2)
        self.frozen = frozen

    def train(self, mode=True):
        super().train(mode)
        if self.frozen:
            self.bn.eval()
        return self


def _model(frozen_head):
    model = nn.Module()
    model.backbone = nn.Sequential(nn.BatchNorm3d(2))
    model.cls_head = _Head(frozen_head)
    return model


def test_unsplittable_kind_raises_naming_the_module():
    model = _model(frozen_head=False)
    assert unsplittable_bn_layers(model) == ['cls_head.bn (BatchNorm1d)']
    with pytest.raises(ValueError, match=r"cls_head\.bn \(BatchNorm1d\)"):
        set_sub_bn_splits(model, 2)
    # Nothing was swapped by the failed call.
    assert type(model.backbone[0]) is nn.BatchNorm3d


def test_frozen_unsplittable_layer_is_left_alone():
    model = _model(frozen_head=True)
    bn1d = model.cls_head.bn
    model.eval()
    assert unsplittable_bn_layers(model) == []
    assert set_sub_bn_splits(model, 2) == 1
    assert model.cls_head.bn is bn1d
    assert isinstance(model.backbone[0], SubBatchNorm3D)
    # The modules' own modes are kept (the loop calls model.train() later).
    assert not model.training and not model.backbone[0].training


def test_duck_typed_bn_outside_torch_hierarchy_is_unsplittable():
    """mmcv's MMSyncBN is an nn.Module with running statistics."""

    class OtherSyncBN(nn.Module):

        def __init__(self):
            super().__init__()
            self.register_buffer('running_mean', torch.zeros(2))
            self.register_buffer('running_var', torch.ones(2))

    model = nn.Sequential(nn.BatchNorm3d(2), OtherSyncBN(),
                          nn.InstanceNorm3d(2, track_running_stats=True),
                          nn.GroupNorm(1, 2))
    assert unsplittable_bn_layers(model) == ['1 (OtherSyncBN)']


def test_frozen_layers_are_not_split():
    """A frozen BN3d (eval mode under model.train()) stays the module it was."""
    from mmaction.models.backbones import ResNet3d
    backbone = ResNet3d(depth=18, pretrained=None, base_channels=4,
                        frozen_stages=1, norm_eval=False)
    frozen = [m for m in [backbone.conv1.bn, *backbone.layer1.modules()]
              if isinstance(m, nn.BatchNorm3d)]
    n_bn = sum(isinstance(m, nn.BatchNorm3d) for m in backbone.modules())
    assert set_sub_bn_splits(backbone, 2) == n_bn - len(frozen)
    still = [m for m in backbone.modules() if isinstance(m, nn.BatchNorm3d)
             and not any(m is s.bn or m is s.split_bn
                         for s in backbone.modules()
                         if isinstance(s, SubBatchNorm3D))]
    assert len(still) == len(frozen)
    assert all(any(m is f for f in frozen) for m in still)


@pytest.mark.parametrize('options', [dict(affine=False),
                                     dict(track_running_stats=False)],
                         ids=['affine=False', 'track_running_stats=False'])
def test_non_affine_and_untracked_bn_split(options):
    net = nn.Sequential(nn.BatchNorm3d(2, **options))
    set_sub_bn_splits(net, 2)
    assert isinstance(net[0], SubBatchNorm3D)
    assert net[0].affine == options.get('affine', True)
    x = torch.tensor([[1., 0.], [5., 10.], [3., 4.], [7., 14.]])
    out = net(x.view(4, 2, 1, 1, 1)).view(4, 2)
    # Normalised per split (biased variance 1 / 4), no affine transform
    # where there is none.
    z = torch.tensor([[-1., -1.], [-1., -1.], [1., 1.], [1., 1.]])
    assert torch.allclose(out, z, atol=1e-4)
    assert aggregate_sub_bn_stats(net) == (
        0 if 'track_running_stats' in options else 1)
    set_sub_bn_splits(net, 1)
    assert type(net[0]) is nn.BatchNorm3d
    assert net[0].affine == options.get('affine', True)
    assert net[0].track_running_stats == options.get('track_running_stats',
                                                     True)


def test_precise_bn_is_exact_average():
    net = nn.Sequential(nn.BatchNorm3d(1))
    batches = [torch.full((2, 1, 1, 1, 1), v) + torch.tensor(
        [-1., 1.]).view(2, 1, 1, 1, 1) for v in (0., 10., 20.)]
    assert update_precise_bn(net, batches, net) == 3
    assert net[0].running_mean.item() == pytest.approx(10.)
    assert net[0].running_var.item() == pytest.approx(2.)  # unbiased var
    assert net[0].momentum == 0.1


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('setting', [dict(norm_eval=True),
                                     dict(frozen_stages=1)],
                         ids=['norm_eval', 'frozen_stages=1'])
@torch.no_grad()
def test_frozen_layers_keep_their_statistics(setting, device):
    torch.manual_seed(0)
    backbone = ResNet3d(depth=18, pretrained=None, base_channels=4,
                        conv1_stride_t=1, pool1_stride_t=1, **setting)
    # A BN after the backbone trains under both settings (norm_eval acts
    # inside the backbone only).
    model = nn.Sequential(backbone, nn.BatchNorm3d(32)).to(device)
    load_random_stats(model, seed=1)
    model.train()
    frozen = {n for n, m in bn_layers(model).items() if not m.training}
    trained = set(bn_layers(model)) - frozen
    if 'norm_eval' in setting:
        assert trained == {'1'}
    else:
        assert 'conv1.bn' in {n[2:] for n in frozen} and len(trained) > 1
        assert not any(n.startswith('0.layer2') for n in frozen)
    # The run without precise BN keeps these.
    without = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()  # as after validation: precise BN must use train() modes
    batches = [torch.randn(2, 3, 4, 16, 16, device=device) for _ in range(3)]
    assert update_precise_bn(model, batches, model) == 3
    assert not model.training and not model[1].training
    state = model.state_dict()
    for name in frozen:
        for stat in STATS:
            key = f'{name}.{stat}'
            assert torch.equal(state[key], without[key]), key
    for name in trained:
        assert not torch.equal(state[f'{name}.running_mean'],
                               without[f'{name}.running_mean']), name
        assert state[f'{name}.num_batches_tracked'].item() == 3
    # The trained BN holds the exact average of the batch statistics of the
    # features the frozen layers (with their own statistics) produce.
    model.train()
    feats = [model[0](x) for x in batches]
    means = torch.stack([f.mean((0, 2, 3, 4)) for f in feats])
    variances = torch.stack([
        f.transpose(0, 1).flatten(1).var(1, unbiased=True) for f in feats])
    assert torch.allclose(model[1].running_mean, means.mean(0), atol=1e-5)
    assert torch.allclose(model[1].running_var, variances.mean(0),
                          rtol=1e-4)
    assert model[1].momentum == 0.1


def test_nothing_to_update_runs_no_forward_pass():
    model = ResNet3d(depth=18, pretrained=None, base_channels=4,
                     norm_eval=True)
    calls = []
    assert update_precise_bn(model, [1, 2], calls.append) == 0
    assert calls == []
    assert model.training


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
