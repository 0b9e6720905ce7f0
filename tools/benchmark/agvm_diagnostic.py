"""AGVM's gradient variances of a model for two halves of a batch, without
training it (paper Sec. 3, Fig. 1).

The code of ``tools/analysis/agvm_variance.py`` and
``tools/benchmark/agvm_large_batch.py``: the constructor's grouping, the
wrapper's flat layout and its statistics (:mod:`mmext.agvm`), so d_i is what
``AGVMOptimWrapper`` would see. Callers check the batch sizes and repeats.
"""
import math
from contextlib import contextmanager
from typing import Callable, Dict, Iterable, List, NamedTuple, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch.optim import SGD

from mmext.agvm.constructor import (assign_parameters, resolve_module_names,
                                    split_groups_by_module)
from mmext.agvm.exchange import GradientLayout
from mmext.agvm.statistics import (DEFAULT_RATIO_RANGE, HalfStatistics,
                                   gradient_variance, half_dot_from_norms,
                                   modulation_factors)

# loss_fn(model, micro_batch) -> scalar loss of that micro-batch.
LossFn = Callable[[nn.Module, object], Tensor]


class VarianceMeasurement(NamedTuple):
    """Per-module results of one pair of halves, shape (M,) each.

    ``d`` = 1 - cos(G_A, G_B) (float64); ``valid`` False where a half's
    gradient is zero or non-finite; ``ratio`` = d_anchor / d_i (NaN where
    undefined); ``mu`` = sqrt(clamp(ratio, lo, hi)).
    """
    module_names: list
    d: Tensor
    valid: Tensor
    ratio: Tensor
    mu: Tensor


def module_layout(model: nn.Module,
                  module_names: Sequence[str] = None) -> GradientLayout:
    """The wrapper's flat layout of ``model``'s trainable parameters.

    Args:
        model (nn.Module): The unwrapped model.
        module_names (Sequence[str], optional): Modules, anchor first; None
            for the model's top-level children with trainable parameters.

    Raises:
        ValueError: On a wrong ``module_names`` (the constructor's check).
    """
    names = resolve_module_names(model, module_names)
    groups = split_groups_by_module(
        [dict(params=[p for p in model.parameters() if p.requires_grad])],
        assign_parameters(model, names), names)
    return GradientLayout(SGD(groups, lr=0.0), names)


def mmengine_loss(model: nn.Module, data_batch: object) -> Tensor:
    """Loss of one micro-batch as mmengine's ``BaseModel.train_step``."""
    data = model.data_preprocessor(data_batch, True)
    losses = (model(**data, mode='loss') if isinstance(data, dict) else
              model(*data, mode='loss'))
    return model.parse_losses(losses)[0]


@contextmanager
def _preserved_state(model: nn.Module):
    """Restore the model's buffers (BN statistics), modes and grads."""
    buffers = [(buf, buf.detach().clone()) for buf in model.buffers()]
    modes = [(m, m.training) for m in model.modules()]
    grads = [(p, p.grad) for p in model.parameters()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, saved in buffers:
                buf.copy_(saved)
        for module, training in modes:
            module.training = training
        for param, grad in grads:
            param.grad = grad


def _accumulate_half(model: nn.Module, layout: GradientLayout,
                     micro_batches: Sequence, loss_fn: LossFn) -> Tensor:
    """Mean gradient of one half in ``layout`` order, shape (numel,): the
    parameters' ``.grad`` are views into it."""
    first = layout.params[0]
    flat = torch.zeros(layout.numel, dtype=first.dtype, device=first.device)
    offset = 0
    for param in layout.params:
        param.grad = flat[offset:offset + param.numel()].view_as(param)
        offset += param.numel()
    for batch in micro_batches:
        # As mmengine's OptimWrapper.scale_loss divides with accumulation.
        (loss_fn(model, batch) / len(micro_batches)).backward()
    return flat


def measure_gradient_variance(
        model: nn.Module, half_a: Sequence, half_b: Sequence,
        layout: GradientLayout,
        ratio_range: Tuple[float, float] = DEFAULT_RATIO_RANGE,
        loss_fn: LossFn = mmengine_loss) -> VarianceMeasurement:
    """d_i between the mean gradients of two halves of a batch, per module.

    Forwards run in training mode; buffers, modes and ``.grad`` are restored
    afterwards and the weights are never written.

    Args:
        model (nn.Module): The unwrapped model.
        half_a (Sequence): Micro-batches of half A (one backward each).
        half_b (Sequence): Micro-batches of half B, other images than A.
        layout (GradientLayout): From :func:`module_layout`.
        ratio_range (tuple[float, float]): The wrapper's ``ratio_range``.
            Defaults to (0.5, 10.0).
        loss_fn (callable): ``loss_fn(model, micro_batch) -> loss``.
            Defaults to :func:`mmengine_loss`.
    """
    with _preserved_state(model):
        model.train()
        grad_a = _accumulate_half(model, layout, half_a, loss_fn)
        grad_b = _accumulate_half(model, layout, half_b, loss_fn)
        # The wrapper's exchange: the dot product from three norms.
        sq_a, sq_b = map(layout.module_sq_norm, (grad_a, grad_b))
        sq_sum = layout.module_sq_norm(grad_a.add_(grad_b))
        stats = HalfStatistics(half_dot_from_norms(sq_sum, sq_a, sq_b), sq_a,
                               sq_b)
    d, valid = gradient_variance(stats)
    mu = modulation_factors(d, valid, 0, ratio_range)
    ok = valid & valid[0] & (d > 0)
    ratio = torch.where(ok, d[0] / torch.where(ok, d, 1.0),
                        torch.full_like(d, math.nan))
    return VarianceMeasurement(layout.module_names, d, valid, ratio, mu)


def summarize(values: Iterable[float]) -> Tuple[float, float]:
    """Mean and sample standard deviation of the finite values; the std of
    one value is NaN (no spread to show), both are NaN for none."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    mean = sum(finite) / len(finite)
    if len(finite) == 1:
        return mean, math.nan
    var = sum((v - mean)**2 for v in finite) / (len(finite) - 1)
    return mean, math.sqrt(var)


def variance_by_batch_size(
        model: nn.Module, draw_half: Callable[[int], Sequence],
        batch_sizes: Sequence[int], repeats: int, layout: GradientLayout,
        ratio_range: Tuple[float, float] = DEFAULT_RATIO_RANGE,
        loss_fn: LossFn = mmengine_loss) -> List[Dict]:
    """d_i, d_anchor / d_i and mu_i against the total batch size N.

    Args:
        model (nn.Module): The unwrapped model, state kept as is.
        draw_half (callable): ``draw_half(images) -> micro-batches`` holding
            that many fresh images; called twice per N and repeat.
        batch_sizes (Sequence[int]): Total batch sizes N, even, >= 2.
        repeats (int): R >= 1 pairs of halves per N.
        layout (GradientLayout): From :func:`module_layout`.
        ratio_range (tuple[float, float]): The wrapper's ``ratio_range``.
            Defaults to (0.5, 10.0).
        loss_fn (callable): As in :func:`measure_gradient_variance`.

    Returns:
        list[dict]: One per N, in order: ``batch_size``, ``repeats`` and, for
        each of ``'d'``, ``'ratio'``, ``'mu'``, a dict module name ->
        ``{'mean', 'std', 'values'}`` (values: R floats, NaN where invalid).
    """
    rows = []
    for size in batch_sizes:
        runs = [
            measure_gradient_variance(model, draw_half(size // 2),
                                      draw_half(size // 2), layout,
                                      ratio_range, loss_fn)
            for _ in range(repeats)
        ]
        row = dict(batch_size=size, repeats=repeats)
        for key in ('d', 'ratio', 'mu'):
            row[key] = {}
            for i, name in enumerate(layout.module_names):
                values = [getattr(run, key)[i].item() if run.valid[i] else
                          math.nan for run in runs]
                mean, std = summarize(values)
                row[key][name] = dict(mean=mean, std=std, values=values)
        rows.append(row)
    return rows
