"""mmext.agvm.exchange: the gradients module by module in one flat buffer
with float64-accurate per-module sums; the two halves' statistics, on the
parameters' device (checked on ``meta``), and in 2 and 3 gloo processes
against one process accumulating the same data.

Parameters and gradients live on the ``meta`` device, which refuses to mix
with CPU tensors and cannot be copied to the host, so a buffer, mask or
statistic created without the parameters' device, or a gradient sent to the
host, fails here as it would fail (or silently copy) on CUDA with NCCL.
``torch.distributed`` is replaced by a double that records the device of
every collective's tensor.
"""
import math
from contextlib import contextmanager
from functools import partial

import pytest
import torch
import torch.distributed as dist
from agvm_toy import (MODULES, ToyModel, build_wrapper, run_processes,
                      toy_batches, train_accumulated, train_ddp)
from helpers import CUDA_MARKS
from torch import nn

from mmext.agvm.exchange import (AccumulationHalves, DistributedHalves,
                                 GradientLayout)
from mmext.agvm.statistics import (HalfStatistics, gradient_variance,
                                   modulation_factors, raw_gradient)

META = torch.device('meta')


def test_layout_buffers_follow_the_parameters():
    model = ToyModel().to(META)
    wrapper = build_wrapper(model, accumulative_counts=2)
    layout = wrapper.layout
    for name, param in model.named_parameters():
        if param.requires_grad and not name.startswith('aux.'):
            param.grad = torch.empty_like(param)
    flat, used = layout.flatten(extra=3)
    assert (flat.device, flat.dtype, flat.shape) == (
        META, torch.float32, (layout.numel + 3, ))
    assert (used.device, used.shape) == (META, (len(layout.params), ))
    norms = layout.segment_sq_norms(layout.params, flat[:layout.numel])
    assert (norms.device, norms.dtype, norms.shape) == (
        META, torch.float64, (3, ))


def test_layout_rejects_parameters_on_several_devices():
    model = ToyModel()
    model.head.to(META)
    with pytest.raises(ValueError, match=r"one device, got \['cpu', 'meta'\]"):
        build_wrapper(model, accumulative_counts=2)


def _layout(sizes, dtype=torch.float32):
    """A layout of one parameter per module, module i of ``sizes[i]``
    elements, plus a 3-element parameter in ``others``."""
    params = [nn.Parameter(torch.zeros(n, dtype=dtype)) for n in sizes]
    extra = nn.Parameter(torch.zeros(3, dtype=dtype))
    groups = [dict(params=[p], agvm_module=f'm{i}')
              for i, p in enumerate(params)]
    groups.append(dict(params=[extra], agvm_module='others'))
    names = [f'm{i}' for i in range(len(sizes))]
    return GradientLayout(torch.optim.SGD(groups, lr=0.1), names), params


def test_segments_are_per_module_and_others_last():
    layout, params = _layout([2, 5])
    assert layout.bounds == [(0, 2), (2, 7), (7, 10)]
    assert layout.numel == 10 and layout.num_modules == 2
    params[1].grad = torch.arange(5.)
    flat, used = layout.flatten()
    assert flat.tolist() == [0, 0, 0, 1, 2, 3, 4, 0, 0, 0]
    assert used.tolist() == [0, 1, 0]
    assert layout.segment_sq_norms(layout.params, flat).tolist() == [0.0, 30.0]


def test_frozen_parameters_stay_out_of_the_layout():
    """In the optimizer (a hook may unfreeze them), not in the statistics:
    frozen when the layout is built means no segment."""
    trained = nn.Parameter(torch.zeros(2))
    frozen = nn.Parameter(torch.zeros(4), requires_grad=False)
    layout = GradientLayout(torch.optim.SGD(
        [dict(params=[frozen, trained], agvm_module='m0')], lr=0.1), ['m0'])
    assert [id(p) for p in layout.params] == [id(trained)]
    assert layout.bounds == [(0, 2), (2, 2)] and layout.group_modules == [0]


def test_accumulation_halves_by_hand_in_buffers_kept_for_the_run():
    """|A|^2, |B|^2, |A + B|^2 per module of the two halves' gradient sums,
    at two re-estimates, in the same two buffers (a fresh 50 MB buffer on
    CPU costs more in page faults than copying the gradients into it)."""
    layout, params = _layout([2, 3])
    halves = AccumulationHalves(layout, 2, partial(raw_gradient, None))
    for step, scale in ((0, 1.0), (1, -2.0)):
        params[0].grad = torch.tensor([1., 2.]) * scale
        params[1].grad = torch.tensor([0., 3., 4.]) * scale
        halves.after_backward(step, 1)
        buffers = halves._buffers.data_ptr()
        params[0].grad += torch.tensor([3., 0.]) * scale  # B = [3, 0]
        params[1].grad += torch.tensor([4., 0., 0.]) * scale  # B = [4, 0, 0]
        halves.after_backward(step, 2)
        stats = halves.measure(step)
        s2 = scale**2
        assert stats.sq_norm_a.tolist() == [5 * s2, 25 * s2]
        assert stats.sq_norm_b.tolist() == [9 * s2, 16 * s2]
        assert stats.dot.tolist() == [3 * s2, 0.0]  # |A + B|^2 = 20, 41
        assert halves._buffers.data_ptr() == buffers
    assert halves.measure(1) is None  # each first half measured once


def test_sums_are_float64_accurate_for_float32_gradients():
    """One float32 dot over 10^7 elements is off by ~1e-5
    relative; the chunked sum stays within 1e-8 of float64."""
    gen = torch.Generator().manual_seed(0)
    n = 10**7 + 3
    layout, _ = _layout([n])
    a = torch.randn(layout.numel, generator=gen)
    exact_sq = a[:n].double().square().sum().item()
    assert torch.dot(a[:n], a[:n]).item() != pytest.approx(exact_sq, rel=1e-6)
    norm = layout.segment_sq_norms(layout.params, a).item()
    assert norm == pytest.approx(exact_sq, rel=1e-8)


class FakeDDP(nn.Module):
    """A model with DDP's ``no_sync`` but no DDP (AGVM's flat fallback)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    @contextmanager
    def no_sync(self):
        yield

    def forward(self, *args):
        return self.module(*args)


class RecordingDist:
    """Stands in for ``dist.all_reduce``/``new_group``: records each
    collective's (device, dtype, group); leaves the tensors unchanged."""

    def __init__(self, monkeypatch):
        self.calls = []
        monkeypatch.setattr(dist, 'new_group', lambda ranks: tuple(ranks))
        monkeypatch.setattr(dist, 'all_reduce', self.all_reduce)

    def all_reduce(self, tensor, op=None, group=None, async_op=False):
        self.calls.append((tensor.device, tensor.dtype, group))
        if not async_op:
            return None
        future = torch.futures.Future()
        future.set_result([tensor])
        return _Work(future)


class _Work:

    def __init__(self, future):
        self._future = future

    def get_future(self):
        return self._future


class FakeBucket:
    """The part of ``dist.GradBucket`` AGVM's hook reads."""

    def __init__(self, params):
        self._params = list(params)
        self._buffer = torch.cat([p.grad.reshape(-1) for p in self._params])

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params


def _meta_batch():
    """(x, y) of ToyModel on meta; ``aux`` gets no gradient from it."""
    return torch.empty(4, 6, device=META), torch.empty(4, 2, device=META)


def _set_meta_grads(layout):
    for param in layout.params:
        param.grad = torch.empty_like(param)


def _assert_statistics_on_meta(stats):
    assert isinstance(stats, HalfStatistics)
    for value in stats:
        assert value.device == META
        assert value.dtype == torch.float64
        assert value.shape == (3, )


def _fill_adam_state(wrapper):
    for param in wrapper.layout.params:
        wrapper.optimizer.state[param] = dict(
            step=torch.tensor(1.), exp_avg=torch.empty_like(param),
            exp_avg_sq=torch.empty_like(param))


def _adam(statistic):
    if statistic == 'grad':
        return {}
    return dict(optimizer=dict(type='AdamW', lr=0.01), statistic='adam')


@pytest.mark.parametrize('statistic', ['grad', 'adam'])
def test_accumulation_halves_stay_on_the_device(statistic):
    """One process: the first half's snapshot and every statistic stay on
    the gradients' device (the old code copied the gradient to the host)."""
    model = ToyModel().to(META)
    wrapper = build_wrapper(model, accumulative_counts=2, **_adam(statistic))
    if statistic == 'adam':
        _fill_adam_state(wrapper)
    for _ in range(2):
        with wrapper.optim_context(model):
            loss = model(*_meta_batch())
        wrapper.backward(loss)
    assert all(p.grad.device == META for p in wrapper.layout.params
               if p.grad is not None)
    _assert_statistics_on_meta(wrapper.halves.measure(0))


@pytest.mark.parametrize('world_size,rank', [(2, 0), (2, 1), (4, 1), (3, 2)])
@pytest.mark.parametrize('statistic', ['grad', 'adam'])
def test_flat_exchange_collectives_get_device_tensors(
        monkeypatch, world_size, rank, statistic):
    """Without a DDP hook: the flat buffer, the mask, the half norms and the
    norm table reach the collectives on the parameters' device, and the
    write-back gives every parameter a grad on its own device."""
    collectives = RecordingDist(monkeypatch)
    monkeypatch.setattr('mmext.agvm.optim_wrapper.get_world_size',
                        lambda: world_size)
    monkeypatch.setattr('mmext.agvm.optim_wrapper.get_rank', lambda: rank)
    written = []
    write_grads = GradientLayout.write_grads

    def record_write(layout, flat, used):
        written.append((flat.device, used.device))
        # A meta mask has no values to read; every grad is "used".
        write_grads(layout, flat, torch.ones(len(layout.params)))

    monkeypatch.setattr(GradientLayout, 'write_grads', record_write)
    model = FakeDDP(ToyModel().to(META))
    wrapper = build_wrapper(model, **_adam(statistic))
    if statistic == 'adam':
        _fill_adam_state(wrapper)
    with wrapper.optim_context(model):
        loss = model(*_meta_batch())
    wrapper.backward(loss)
    stats = wrapper.halves.measure(0)

    _assert_statistics_on_meta(stats)
    assert written == [(META, META)]
    assert all(p.grad.device == META for p in wrapper.layout.params)
    devices = {device for device, _, _ in collectives.calls}
    assert devices == {META}
    # Half all-reduce only for halves of 2+ ranks (and not on rank 4 of 5
    # or 2 of 3), then the gradient + mask, then the (3, M) norm table.
    dtypes = [dtype for _, dtype, _ in collectives.calls]
    in_half = world_size >= 4 and rank < 2 * (world_size // 2)
    assert dtypes == [torch.float32] * (1 + in_half) + [torch.float64]


@pytest.mark.parametrize('world_size,rank', [(2, 0), (4, 1), (4, 2), (3, 2)])
def test_comm_hook_measures_on_the_device(monkeypatch, world_size, rank):
    """DDP's hook path: bucket reductions and norms on the bucket's device;
    which rank fills which row of the norm table."""
    collectives = RecordingDist(monkeypatch)
    model = ToyModel().to(META)
    wrapper = build_wrapper(model, accumulative_counts=2)
    layout = wrapper.layout
    _set_meta_grads(layout)
    halves = DistributedHalves(layout, world_size, rank,
                               wrapper.precondition)
    halves._hooked[id(model)] = True  # as if registered on a DDP model
    with halves.measuring(model, 5):
        pass
    # Two buckets in DDP's order (last parameters first), with 'others'.
    params = list(reversed(layout.params))
    for bucket in (FakeBucket(params[:4]), FakeBucket(params[4:])):
        mean = halves._comm_hook(None, bucket).wait()
        assert mean.device == META
    rows = sorted(row for row, _ in halves._norms)
    assert all(norms.device == META for _, norms in halves._norms)
    stats = halves.measure(5)
    _assert_statistics_on_meta(stats)
    assert {device for device, _, _ in collectives.calls} == {META}
    assert collectives.calls[-1][1:] == (torch.float64, None)
    side = rank // (world_size // 2) if rank < world_size // 2 * 2 else None
    leader = side is not None and rank % (world_size // 2) == 0
    expected = ([side] * 2 if leader else []) + (
        [2] * 2 if rank == halves.sum_rank else [])
    assert rows == sorted(expected)


def _load(tmp_path, world_size):
    return [torch.load(tmp_path / f'rank{r}.pth', weights_only=False)
            for r in range(world_size)]


@pytest.mark.parametrize('world_size,parts_per_rank,exchange,device', [
    (2, 1, 'hook', 'cpu'), (2, 2, 'hook', 'cpu'), (2, 1, 'flat', 'cpu'),
    pytest.param(4, 1, 'hook', 'cpu', marks=pytest.mark.slow),
    pytest.param(2, 1, 'hook', 'cuda', marks=CUDA_MARKS),
    pytest.param(2, 1, 'flat', 'cuda', marks=CUDA_MARKS)])
def test_processes_match_single_process_accumulation(
        tmp_path, world_size, parts_per_rank, exchange, device):
    """Halves = ranks vs halves = first/second half of the micro-batches of
    one process, on the same data; with 2 parts per rank DDP accumulates.
    Measured in DDP's communication hook (with 4 ranks, after a reduction
    inside each half), or, when DDP already has another hook, on the
    flattened gradients."""
    batches = toy_batches(num_steps=4,
                          num_parts=world_size * parts_per_rank)
    run_processes(train_ddp, world_size,
                  (batches, str(tmp_path), {}, exchange, device))
    ranks = _load(tmp_path, world_size)
    model, wrapper, history = train_accumulated(batches)
    for result in ranks:
        assert result['hooked'] == (exchange == 'hook')
        for got, want in zip(result['history'], history):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(result['variance'],
                                   wrapper.last_variance, rtol=1e-4,
                                   atol=1e-6)
        for key, value in model.state_dict().items():
            torch.testing.assert_close(result['state'][key], value,
                                       rtol=1e-5, atol=1e-6)
    # The factors really moved (the comparison is not 1 == 1).
    assert (history[-1] - 1).abs().max() > 1e-3
    # 'unused' never got a gradient, 'aux' (rank/part 0 only) did.
    assert torch.equal(ranks[0]['state']['unused.weight'],
                       ToyModel().unused.weight)
    assert not torch.equal(ranks[0]['state']['aux.weight'],
                           ToyModel().aux.weight)


def _grads(model, part):
    model.zero_grad()
    model(*part).backward()
    return {n: p.grad.clone() if p.grad is not None else None
            for n, p in model.named_parameters()}


@pytest.mark.parametrize('exchange', ['hook', 'flat'])
def test_three_processes_unbiased_step(tmp_path, exchange):
    """World size 3: halves are ranks {0} and {1}; rank 2 only enters the
    update, which must be the plain mean of the 3 gradients."""
    batches = toy_batches(num_steps=3, num_parts=3)
    run_processes(train_ddp, 3, (batches[:1], str(tmp_path), {}, exchange))
    ranks = _load(tmp_path, 3)
    model = ToyModel()
    grads = [_grads(model, part) for part in batches[0]]

    def flat(g, module):
        return torch.cat([v.flatten() for n, v in g.items()
                          if n.startswith(module + '.')]).double()

    stats = HalfStatistics(*[torch.stack(v) for v in zip(*[
        (flat(grads[0], m) @ flat(grads[1], m),
         flat(grads[0], m) @ flat(grads[0], m),
         flat(grads[1], m) @ flat(grads[1], m)) for m in MODULES])])
    d, valid = gradient_variance(stats)
    factors = 0.5 + 0.5 * modulation_factors(d, valid, 0, (0.5, 10.))
    for result in ranks:
        torch.testing.assert_close(result['history'][0], factors)
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        used = [g[name] for g in grads if g[name] is not None]
        module = name.split('.')[0]
        factor = (factors[MODULES.index(module)].item()
                  if module in MODULES else 1.0)
        if not used:
            expected = param
        else:
            # Unused on a rank counts as a zero gradient there, as in DDP.
            expected = param - 0.1 * factor * sum(used) / 3
        torch.testing.assert_close(ranks[0]['state'][name], expected,
                                   rtol=1e-5, atol=1e-6)
    assert math.isfinite(ranks[0]['history'][0].sum().item())


def test_three_processes_several_steps_do_not_hang(tmp_path):
    batches = toy_batches(num_steps=5, num_parts=3)
    # Generous: 3 spawned processes start slowly on a loaded 2-core machine;
    # a hang still fails.
    run_processes(train_ddp, 3,
                  (batches, str(tmp_path), dict(update_interval=2)),
                  timeout=300)
    ranks = _load(tmp_path, 3)
    for result in ranks[1:]:
        torch.testing.assert_close(result['history'][-1],
                                   ranks[0]['history'][-1])
        for key, value in ranks[0]['state'].items():
            torch.testing.assert_close(result['state'][key], value)
