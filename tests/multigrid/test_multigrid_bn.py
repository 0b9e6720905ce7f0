"""mmext.multigrid.bn: sub-batch BN and precise BN for every BN kind of
mmaction2 recipes, on every device and memory format.

Kinds: ``BatchNorm3d`` (``BN3d``), ``SyncBatchNorm`` (``SyncBN``; without a
process group it normalises locally) and mmengine's BatchNormXd (``SyncBN``
after ``revert_sync_batchnorm``).
"""
import copy

import pytest
import torch
import torch.nn as nn
from helpers import CUDA_MARKS, DEVICES
from mg_helpers import STATS, bn_layers, load_random_stats
from mmaction.models.backbones import ResNet3d
from mmaction.models.common import SubBatchNorm3D

from mmext.compat import batch_norm_xd_type
from mmext.multigrid.bn import (SubBatchNorm, disable_sub_bn, enable_sub_bn,
                                unsplittable_bn_layers, update_precise_bn)
from bench_utils import run_processes

KINDS = [nn.BatchNorm3d, nn.SyncBatchNorm, batch_norm_xd_type()]
CL = torch.channels_last_3d


def _net(kind, device='cpu', dtype=torch.float32):
    net = nn.Sequential(nn.Identity(), kind(2, momentum=None))
    with torch.no_grad():
        net[1].weight.copy_(torch.tensor([2., 3.]))
        net[1].bias.copy_(torch.tensor([0.5, -1.]))
    return net.to(device, dtype)


# Channel 0: clips 1, 3 | 5, 7; channel 1: 0, 4 | 10, 14 (two splits of two
# consecutive clips): per split mean 2 | 6 and 2 | 12, biased variance 1 and
# 4, so every value normalises to -1 or +1.
X = torch.tensor([[1., 0.], [3., 4.], [5., 10.], [7., 14.]])
Z = torch.tensor([[-1., -1.], [1., 1.], [-1., -1.], [1., 1.]])


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', KINDS, ids=lambda k: k.__name__)
def test_splits_normalise_apart_and_track_the_whole_batch(kind, device):
    net = _net(kind, device)
    weight, keys = net[1].weight, list(net.state_dict())
    assert enable_sub_bn(net, 2) == 1
    sub = net[1]
    assert isinstance(sub, SubBatchNorm) and isinstance(sub, kind)
    assert sub.plain_type is kind and sub.weight is weight
    assert list(net.state_dict()) == keys
    net.train()
    out = net(X.to(device).view(4, 2, 1, 1, 1)).view(4, 2)
    expected = Z * torch.tensor([2., 3.]) + torch.tensor([0.5, -1.])
    assert torch.allclose(out.cpu(), expected, atol=1e-4)
    # momentum=None after one batch: the whole batch's statistics, what a
    # plain BN over the 4 clips tracks (unbiased: 20/3 and 116/3).
    assert torch.allclose(sub.running_mean.cpu(), torch.tensor([4., 7.]))
    assert torch.allclose(sub.running_var.cpu(),
                          torch.tensor([20. / 3, 116. / 3]))
    assert sub.num_batches_tracked.item() == 1
    assert sub.running_mean.device.type == device
    plain = _net(kind, device).train()
    plain(X.to(device).view(4, 2, 1, 1, 1))
    assert torch.allclose(sub.running_var, plain[1].running_var)
    # A batch of bn_base_size clips is one split: the plain layer's output.
    two = X[:2].to(device).view(2, 2, 1, 1, 1)
    assert torch.equal(net(two), plain(two))
    # Back to the plain kind, same Parameter and statistics.
    assert disable_sub_bn(net) == 1
    assert type(net[1]) is kind and net[1].weight is weight
    assert not hasattr(net[1], 'bn_base_size')


@pytest.mark.parametrize('device', DEVICES)
def test_split_count_follows_every_batch(device):
    """bn_base_size clips per split at any batch (12 -> 3, 32 -> 8; the
    plan refuses a batch above it that is not a multiple)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.BatchNorm3d(3, affine=False)).to(device)
    enable_sub_bn(net, 4)
    for n in (12, 32):
        # Every block of 4 clips is shifted apart: only splits of exactly
        # these blocks normalise each to mean 0, variance 1.
        shift = torch.arange(n // 4, device=device).repeat_interleave(4)
        x = torch.randn(n, 3, 2, 3, 3, device=device) + 10 * shift.view(
            -1, 1, 1, 1, 1)
        out = net(x)
        for split in out.split(4):
            assert torch.allclose(split.mean((0, 2, 3, 4)),
                                  torch.zeros(3, device=device), atol=1e-5)
            assert torch.allclose(split.var((0, 2, 3, 4), unbiased=False),
                                  torch.ones(3, device=device), atol=1e-3)


def _bn_relu_bn(kind):
    torch.manual_seed(0)
    net = nn.Sequential(kind(3), nn.ReLU(), kind(3))
    load_random_stats(net, seed=3)
    with torch.no_grad():
        for bn in (net[0], net[2]):
            bn.weight.uniform_(0.5, 2)
            bn.bias.uniform_(-1, 1)
    return net


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', KINDS, ids=lambda k: k.__name__)
def test_channels_last_3d_matches_contiguous(kind, device):
    """Training, eval, precise BN and the state dict of sub-batch BN layers
    on channels_last_3d inputs equal those on contiguous ones."""
    nets = {}
    # float64: the two layouts may sum in different orders.
    x = torch.randn(8, 3, 4, 6, 6, device=device, dtype=torch.float64)
    for fmt in (torch.contiguous_format, CL):
        net = _bn_relu_bn(kind).to(device, torch.float64)
        formats = []
        net[2].register_forward_pre_hook(lambda m, args: formats.append(
            args[0].is_contiguous(memory_format=fmt)))
        enable_sub_bn(net, 2)
        inputs = x.clone(memory_format=fmt).requires_grad_()
        out = net.train()(inputs)
        out.pow(2).sum().backward()
        nets[fmt] = (net, out, inputs.grad, net.eval()(x.to(
            memory_format=fmt)))
        assert formats == [True, True]
    (a, out_a, grad_a, eval_a), (b, out_b, grad_b, eval_b) = nets.values()
    assert out_b.is_contiguous(memory_format=CL)
    assert grad_b.is_contiguous(memory_format=CL)
    for got, want in ((out_b, out_a), (grad_b, grad_a), (eval_b, eval_a)):
        assert torch.allclose(got, want, atol=1e-10)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(q.grad, p.grad, atol=1e-10), name
    for (name, buf), other in zip(a.named_buffers(), b.buffers()):
        assert torch.allclose(other, buf, atol=1e-10), name
    batches = [torch.randn(16, 3, 4, 6, 6, device=device,
                           dtype=torch.float64) for _ in range(2)]
    for net, fmt in ((a, torch.contiguous_format), (b, CL)):
        assert update_precise_bn(
            net, [t.contiguous(memory_format=fmt) for t in batches], net) == 2
    for (name, buf), other in zip(a.named_buffers(), b.buffers()):
        assert torch.allclose(other, buf, atol=1e-10), name
    assert b[2].num_batches_tracked.item() == 2
    plain = _bn_relu_bn(kind)
    plain.load_state_dict(b.state_dict(), strict=True)


@pytest.mark.parametrize('device', DEVICES)
def test_channels_last_3d_stays_channels_last(device):
    net = nn.Sequential(nn.BatchNorm3d(4)).to(device)
    enable_sub_bn(net, 2)
    x = torch.randn(8, 4, 3, 5, 5, device=device).to(
        memory_format=CL).requires_grad_()
    out = net(x)
    assert out.is_contiguous(memory_format=CL)
    out.backward(torch.ones_like(out))
    assert x.grad.is_contiguous(memory_format=CL)


@pytest.mark.parametrize('kind', KINDS, ids=lambda k: k.__name__)
def test_sub_bn_on_meta_keeps_device_and_dtype(kind):
    """The split path creates nothing off the input's device and dtype."""
    net = nn.Sequential(nn.Conv3d(3, 2, 1), kind(2)).to('meta', torch.float64)
    enable_sub_bn(net, 2)
    out = net.train()(torch.empty(8, 3, 2, 4, 4, device='meta',
                                  dtype=torch.float64))
    assert out.device.type == 'meta' and out.dtype == torch.float64
    tensors = dict(list(net.named_parameters()) + list(net.named_buffers()))
    for name, t in tensors.items():
        assert t.device.type == 'meta', name
        expected = torch.int64 if 'num_batches' in name else torch.float64
        assert t.dtype == expected, name


@pytest.mark.parametrize('kind', KINDS, ids=lambda k: k.__name__)
def test_bf16_autocast_keeps_statistics_in_float32(kind):
    """Under CPU autocast (the AMP path) the conv gives bf16; sub-BN keeps
    float32 buffers and statistics of that bf16 output, returns bf16."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(3, 4, 3, padding=1), kind(4))
    enable_sub_bn(net, 2)
    reference = copy.deepcopy(net)
    x = torch.randn(8, 3, 4, 6, 6)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = net.train()(x)
        feature = net[0](x)
    assert out.dtype == torch.bfloat16 and feature.dtype == torch.bfloat16
    assert all(b.dtype != torch.bfloat16 for b in net.buffers())
    # The first sub-BN layer tracked the whole batch of the bf16 feature,
    # in float32 (as a float32 BN on those values).
    reference[1].train()(feature.float())
    assert torch.allclose(net[1].running_mean, reference[1].running_mean,
                          atol=1e-6)
    assert torch.allclose(net[1].running_var, reference[1].running_var,
                          rtol=1e-5)
    out.float().sum().backward()
    assert net[1].weight.grad.dtype == torch.float32


def test_precise_bn_of_sub_bn_is_the_population_of_whole_batches():
    """Batches {-1, 1, -3, 3} and {9, 11, 7, 13}: mean 5, population
    variance 240 / 8 = 30 (the batch variances alone average 20 / 3)."""
    net = nn.Sequential(nn.BatchNorm3d(1))
    enable_sub_bn(net, 2)
    batches = [torch.tensor([v - 1., v + 1., v - 3., v + 3.]).view(
        4, 1, 1, 1, 1) for v in (0., 10.)]
    assert update_precise_bn(net, batches, net) == 2
    assert net[0].running_mean.item() == pytest.approx(5.)
    assert net[0].running_var.item() == pytest.approx(30.)
    assert net[0].momentum == 0.1 and isinstance(net[0], SubBatchNorm)


def test_precise_bn_of_mmaction_sub_batchnorm3d_merges_its_splits():
    """mmaction2's SubBatchNorm3D (2 splits): split_bn's channels see
    {-1, -3, 9, 7} and {1, 3, 11, 13} (means 3 and 7, population variances
    26); aggregate_stats gives mean 5 and 26 + 4 = 30, the population of
    all values, as for a plain BN."""
    net = nn.Sequential(SubBatchNorm3D(1, num_splits=2))
    batches = [torch.tensor([v - 1., v + 1., v - 3., v + 3.]).view(
        4, 1, 1, 1, 1) for v in (0., 10.)]
    assert update_precise_bn(net, batches, net) == 2
    split = net[0].split_bn
    assert split.running_mean.tolist() == pytest.approx([3., 7.])
    assert split.running_var.tolist() == pytest.approx([26., 26.])
    assert net[0].bn.running_mean.item() == pytest.approx(5.)
    assert net[0].bn.running_var.item() == pytest.approx(30.)


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


def test_unsplittable_kind_is_named_and_left_alone():
    """The model check refuses such a layer before training
    (test_multigrid_checks); enable_sub_bn splits the others only."""
    model = _model(frozen_head=False)
    assert unsplittable_bn_layers(model) == ['cls_head.bn (BatchNorm1d)']
    assert enable_sub_bn(model, 2) == 1
    assert type(model.cls_head.bn) is nn.BatchNorm1d
    assert isinstance(model.backbone[0], SubBatchNorm)


def test_frozen_unsplittable_layer_is_left_alone():
    model = _model(frozen_head=True)
    bn1d = model.cls_head.bn
    model.eval()
    assert unsplittable_bn_layers(model) == []
    assert enable_sub_bn(model, 2) == 1
    assert type(model.cls_head.bn) is nn.BatchNorm1d
    assert isinstance(model.backbone[0], SubBatchNorm)
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
                          nn.GroupNorm(1, 2), SubBatchNorm3D(2, num_splits=2))
    # A recipe's own mmaction2 SubBatchNorm3D counts as one layer.
    assert unsplittable_bn_layers(model) == ['1 (OtherSyncBN)',
                                             '4 (SubBatchNorm3D)']


def test_frozen_layers_are_not_split():
    """A frozen BN3d (eval mode under model.train()) stays a plain BN3d."""
    backbone = ResNet3d(depth=18, pretrained=None, base_channels=4,
                        frozen_stages=1, norm_eval=False)
    frozen = [m for m in [backbone.conv1.bn, *backbone.layer1.modules()]
              if isinstance(m, nn.BatchNorm3d)]
    n_bn = sum(isinstance(m, nn.BatchNorm3d) for m in backbone.modules())
    assert enable_sub_bn(backbone, 2) == n_bn - len(frozen) == 15
    still = [m for m in backbone.modules() if type(m) is nn.BatchNorm3d]
    assert len(still) == len(frozen)
    assert all(any(m is f for f in frozen) for m in still)
    # mmaction2's norm_eval/frozen_stages logic still sees BN layers.
    backbone.train()
    assert [m.training for m in frozen] == [False] * len(frozen)


@pytest.mark.parametrize('options', [dict(affine=False),
                                     dict(track_running_stats=False)],
                         ids=['affine=False', 'track_running_stats=False'])
def test_non_affine_and_untracked_bn_split(options):
    net = nn.Sequential(nn.BatchNorm3d(2, **options))
    enable_sub_bn(net, 2)
    assert isinstance(net[0], SubBatchNorm)
    out = net(X.view(4, 2, 1, 1, 1)).view(4, 2)
    # Normalised per split (biased variance 1 / 4), no affine transform
    # where there is none.
    assert torch.allclose(out, Z, atol=1e-4)
    if 'track_running_stats' in options:
        assert net[0].running_mean is None
    else:
        assert net[0].num_batches_tracked.item() == 1
    disable_sub_bn(net)
    assert type(net[0]) is nn.BatchNorm3d
    assert net[0].affine == options.get('affine', True)
    assert net[0].track_running_stats == options.get('track_running_stats',
                                                     True)


def test_precise_bn_estimates_the_population_variance():
    """Batches {-1, 1}, {9, 11}, {19, 21}: mean 10, population variance
    (121 + 81 + 1 + 1 + 81 + 121) / 6 = 406 / 6 (fvcore's estimator; the
    mean of the batch variances, 2, is 97 % low)."""
    net = nn.Sequential(nn.BatchNorm3d(1))
    batches = [torch.full((2, 1, 1, 1, 1), v) + torch.tensor(
        [-1., 1.]).view(2, 1, 1, 1, 1) for v in (0., 10., 20.)]
    assert update_precise_bn(net, batches, net) == 3
    assert net[0].running_mean.item() == pytest.approx(10.)
    assert net[0].running_var.item() == pytest.approx(406. / 6)
    assert net[0].momentum == 0.1 and net[0].num_batches_tracked == 3


def test_precise_bn_weights_batches_by_their_values():
    """Batches of 2 and 4 clips of 2x2 pixels, different means: the
    population of all 24 values per channel, as fvcore weights them."""
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randn(2, 3, 1, 2, 2, generator=gen) * 2 + 5,
               torch.randn(4, 3, 1, 2, 2, generator=gen) - 3]
    net = nn.Sequential(nn.BatchNorm3d(3))
    assert update_precise_bn(net, batches, net) == 2
    every = torch.cat(batches).transpose(0, 1).flatten(1)
    assert torch.allclose(net[0].running_mean, every.mean(1), atol=1e-5)
    assert torch.allclose(net[0].running_var, every.var(1, unbiased=False),
                          rtol=1e-5)


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
    # The trained BN holds the population statistics of the features the
    # frozen layers (with their own statistics) produce.
    model.train()
    feats = torch.cat([model[0](x) for x in batches]).transpose(0, 1)
    assert torch.allclose(model[1].running_mean, feats.flatten(1).mean(1),
                          atol=1e-5)
    assert torch.allclose(model[1].running_var,
                          feats.flatten(1).var(1, unbiased=False), rtol=1e-4)
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
    # {8, 10} -> {1, 3}, rank 1 inputs {30, 34} -> {22, 26} (times the eps
    # scale); together mean 13, population variance 494 / 4.
    values = [[8., 10.], [30., 34.]][rank]
    batches = [torch.tensor(values).view(2, 1, 1, 1, 1)]
    assert update_precise_bn(net, batches, net) == 1
    out[rank] = (net[0].running_mean.item(), net[1].running_mean.item(),
                 net[1].running_var.item())


def test_precise_bn_averages_trained_layers_across_ranks():
    with torch.multiprocessing.Manager() as manager:
        shared = manager.dict()
        run_processes(_precise_bn_rank, 2, (shared, ), timeout=120)
        out = dict(shared)
    eps_scale = (1 + 1e-5)**-0.5
    for rank in range(2):
        frozen, mean, var = out[rank]
        assert frozen == rank + 7.  # neither reset nor averaged
        assert mean == pytest.approx(13. * eps_scale, rel=1e-6)
        assert var == pytest.approx(494. / 4 * eps_scale**2, rel=1e-5)


def _sync_sub_bn_rank(rank, world_size, out):
    torch.cuda.set_device(0)  # both ranks share the one GPU (gloo)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randn(4, 2, 1, 2, 2, generator=gen) * (r + 1) + 3 * r
               for r in range(world_size)]
    net = nn.Sequential(nn.SyncBatchNorm(2, momentum=None)).cuda()
    enable_sub_bn(net, 2)
    y = net.train()(batches[rank].cuda())
    out[rank] = (y.cpu(), net[0].running_mean.cpu(), net[0].running_var.cpu())


@pytest.mark.parametrize('device', [pytest.param('cuda', marks=CUDA_MARKS)])
def test_sync_sub_bn_normalises_split_k_over_ranks(device):
    """Two gloo processes on one GPU: split k of both ranks is normalised
    together; the running statistics cover both ranks' whole batches."""
    with torch.multiprocessing.Manager() as manager:
        shared = manager.dict()
        run_processes(_sync_sub_bn_rank, 2, (shared, ), timeout=300)
        out = dict(shared)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randn(4, 2, 1, 2, 2, generator=gen) * (r + 1) + 3 * r
               for r in range(2)]
    for rank in range(2):
        y, mean, var = out[rank]
        for k in range(2):
            together = torch.cat([b[2 * k:2 * k + 2] for b in batches])
            m = together.mean((0, 2, 3, 4), keepdim=True)
            v = together.var((0, 2, 3, 4), unbiased=False, keepdim=True)
            want = (batches[rank][2 * k:2 * k + 2] - m) / (v + 1e-5).sqrt()
            assert torch.allclose(y[2 * k:2 * k + 2], want, atol=1e-5)
        every = torch.cat(batches)
        assert torch.allclose(mean, every.mean((0, 2, 3, 4)), atol=1e-5)
        assert torch.allclose(var, every.var((0, 2, 3, 4)), rtol=1e-5)
