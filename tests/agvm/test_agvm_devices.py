"""AGVM keeps every tensor on the parameters' device (checked on ``meta``).

Parameters and gradients live on the ``meta`` device, which refuses to mix
with CPU tensors and cannot be copied to the host, so a buffer, mask or
statistic created without the parameters' device, or a gradient sent to the
host, fails here as it would fail (or silently copy) on CUDA with NCCL.
``torch.distributed`` is replaced by a double that records the device of
every collective's tensor.
"""
from contextlib import contextmanager

import pytest
import torch
import torch.distributed as dist
from torch import nn

from agvm_toy import ToyModel, build_wrapper
from mmext.agvm import GradientLayout, HalfStatistics
from mmext.agvm.exchange import DistributedHalves

META = torch.device('meta')


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
    norms = layout.module_sq_norm(flat[:layout.numel])
    assert (norms.device, norms.dtype, norms.shape) == (
        META, torch.float64, (3, ))
    dots = layout.module_dot(flat, flat)
    assert (dots.device, dots.dtype) == (META, torch.float64)


def test_layout_rejects_parameters_on_several_devices():
    model = ToyModel()
    model.head.to(META)
    with pytest.raises(ValueError, match=r"share one device; found "
                       r"\['cpu', 'meta'\]"):
        build_wrapper(model, accumulative_counts=2)


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
    _assert_statistics_on_meta(wrapper._collect(0))


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
    stats = wrapper._collect(0)

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
                               wrapper._precondition)
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
