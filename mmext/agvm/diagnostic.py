"""Measure AGVM's gradient variances of a model without training it.

d_i per module for two given halves of a batch (paper Sec. 3 and Fig. 1),
with the wrapper's statistics and the constructor's grouping; the command
line is ``tools/analysis/agvm_variance.py``.
"""
import math
from contextlib import contextmanager
from typing import (Callable, Dict, Iterable, Iterator, List, NamedTuple,
                    Optional, Sequence, Tuple)

import torch
from torch import Tensor, nn
from torch.optim import SGD

from .constructor import (assign_parameters, resolve_module_names,
                          split_groups_by_module)
from .exchange import GradientLayout
from .statistics import (DEFAULT_RATIO_RANGE, HalfStatistics,
                         gradient_variance, modulation_factors)

__all__ = [
    'VarianceMeasurement', 'module_layout', 'mmengine_loss',
    'measure_gradient_variance', 'summarize', 'variance_by_batch_size'
]

# loss_fn(model, micro_batch) -> scalar loss of that micro-batch.
LossFn = Callable[[nn.Module, object], Tensor]


class VarianceMeasurement(NamedTuple):
    """Per-module gradient variance of one pair of halves.

    Tensors have shape (M,), modules in ``module_names`` order.

    Attributes:
        module_names (list[str]): The modules, anchor first.
        d (Tensor): d_i = 1 - cos(G_A^(i), G_B^(i)), float64, in [0, 2].
        valid (Tensor): Bool; False where a half's gradient is zero or
            non-finite (``d`` and ``mu`` are meaningless there).
        ratio (Tensor): d_anchor / d_i (NaN where not valid or d_i = 0).
        mu (Tensor): sqrt(clamp(d_anchor / d_i, lo, hi)), float64.
    """
    module_names: list
    d: Tensor
    valid: Tensor
    ratio: Tensor
    mu: Tensor


def module_layout(model: nn.Module,
                  module_names: Optional[Sequence[str]] = None
                  ) -> GradientLayout:
    """The wrapper's flat gradient layout for ``model``'s trainable params.

    Args:
        model (nn.Module): The unwrapped model.
        module_names (Sequence[str], optional): Modules, anchor first; None
            for the model's top-level children with trainable parameters.

    Returns:
        GradientLayout: Modules in order, then ``'others'``.

    Raises:
        ValueError: On a wrong ``module_names``
            (:mod:`mmext.agvm.constructor`).
    """
    names = resolve_module_names(model, module_names)
    owners = assign_parameters(model, names)
    groups = split_groups_by_module(
        [dict(params=[p for p in model.parameters() if p.requires_grad])],
        owners, names)
    return GradientLayout(SGD(groups, lr=0.0), names)


def mmengine_loss(model: nn.Module, data_batch: object) -> Tensor:
    """Loss of one micro-batch as ``BaseModel.train_step`` computes it.

    Args:
        model (nn.Module): An mmengine ``BaseModel`` (mmdet/mmseg models).
        data_batch (dict | tuple | list): A batch from its dataloader.

    Returns:
        Tensor: The scalar total loss (``model.parse_losses``).
    """
    data = model.data_preprocessor(data_batch, True)
    if isinstance(data, dict):
        losses = model(**data, mode='loss')
    else:
        losses = model(*data, mode='loss')
    loss, _ = model.parse_losses(losses)
    return loss


@contextmanager
def _preserved_state(model: nn.Module) -> Iterator[None]:
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


def _bind_grads(layout: GradientLayout, flat: Tensor) -> None:
    """Make every parameter's ``.grad`` a view into ``flat`` (zeroed)."""
    flat.zero_()
    offset = 0
    for param in layout.params:
        param.grad = flat[offset:offset + param.numel()].view_as(param)
        offset += param.numel()


def _accumulate_half(model: nn.Module, layout: GradientLayout,
                     micro_batches: Sequence, loss_fn: LossFn) -> Tensor:
    """Mean gradient of one half, laid out as ``layout``, shape (numel,)."""
    if not micro_batches:
        raise ValueError('each half needs at least one micro-batch')
    first = layout.params[0]
    flat = torch.empty(layout.numel, dtype=first.dtype, device=first.device)
    _bind_grads(layout, flat)
    for batch in micro_batches:
        # Divided as mmengine's OptimWrapper.scale_loss does with
        # accumulation, so the buffer holds the half's mean gradient.
        (loss_fn(model, batch) / len(micro_batches)).backward()
    return flat


def measure_gradient_variance(
        model: nn.Module,
        half_a: Sequence,
        half_b: Sequence,
        layout: Optional[GradientLayout] = None,
        ratio_range: Tuple[float, float] = DEFAULT_RATIO_RANGE,
        loss_fn: LossFn = mmengine_loss) -> VarianceMeasurement:
    """d_i between the mean gradients of two halves of a batch, per module.

    Forwards run in training mode; buffers, modes and ``.grad`` are restored
    afterwards and the weights are never written.

    Args:
        model (nn.Module): The unwrapped model.
        half_a (Sequence): Micro-batches of half A (each one forward and
            backward).
        half_b (Sequence): Micro-batches of half B, disjoint images from A.
        layout (GradientLayout, optional): From :func:`module_layout`
            (default: the model's top-level modules).
        ratio_range (tuple[float, float]): The wrapper's ``ratio_range``.
        loss_fn (callable): ``loss_fn(model, micro_batch) -> loss``; default
            :func:`mmengine_loss`.

    Returns:
        VarianceMeasurement: d_i, validity, d_anchor / d_i and mu_i.

    Raises:
        ValueError: If a half is empty or a trainable parameter is not
            float32.
    """
    layout = layout or module_layout(model)
    not_fp32 = {p.dtype for p in layout.params} - {torch.float32}
    if not_fp32:
        raise ValueError(f'the gradient variance diagnostic runs in float32; '
                         f'the model has {sorted(map(str, not_fp32))} '
                         f'parameters: convert it with model.float()')
    with _preserved_state(model):
        model.train()
        grad_a = _accumulate_half(model, layout, half_a, loss_fn)
        grad_b = _accumulate_half(model, layout, half_b, loss_fn)
        stats = HalfStatistics(
            dot=layout.module_dot(grad_a, grad_b),
            sq_norm_a=layout.module_sq_norm(grad_a),
            sq_norm_b=layout.module_sq_norm(grad_b))
    d, valid = gradient_variance(stats)
    mu = modulation_factors(d, valid, 0, ratio_range)
    ok = valid & valid[0] & (d > 0)
    ratio = torch.where(ok, d[0] / torch.where(ok, d, 1.0),
                        torch.full_like(d, math.nan))
    return VarianceMeasurement(layout.module_names, d, valid, ratio, mu)


def summarize(values: Iterable[float]) -> Tuple[float, float]:
    """Mean and sample standard deviation (NaN for one value), NaN-free.

    Args:
        values (Iterable[float]): Measurements; NaNs are ignored.

    Returns:
        tuple[float, float]: (mean, std); (nan, nan) if none is finite.
    """
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    mean = sum(finite) / len(finite)
    if len(finite) == 1:  # one value has no spread to show, not a zero one
        return mean, math.nan
    var = sum((v - mean)**2 for v in finite) / (len(finite) - 1)
    return mean, math.sqrt(var)


def variance_by_batch_size(
        model: nn.Module,
        draw_half: Callable[[int], Sequence],
        batch_sizes: Sequence[int],
        repeats: int,
        layout: Optional[GradientLayout] = None,
        ratio_range: Tuple[float, float] = DEFAULT_RATIO_RANGE,
        loss_fn: LossFn = mmengine_loss) -> List[Dict]:
    """d_i, d_anchor / d_i and mu_i against the total batch size N.

    Args:
        model (nn.Module): The unwrapped model, state kept as is.
        draw_half (callable): ``draw_half(images) -> micro-batches`` holding
            that many fresh images; called twice per N and repeat.
        batch_sizes (Sequence[int]): Total batch sizes N, even, >= 2.
        repeats (int): R >= 1 pairs of halves per N.
        layout (GradientLayout, optional): From :func:`module_layout`
            (default: the model's top-level modules).
        ratio_range (tuple[float, float]): The wrapper's ``ratio_range``.
        loss_fn (callable): As in :func:`measure_gradient_variance`.

    Returns:
        list[dict]: One per N, in order: ``batch_size``, ``repeats`` and, for
        each of ``'d'``, ``'ratio'``, ``'mu'``, a dict module name ->
        ``{'mean', 'std', 'values'}`` (values: R floats, NaN where invalid).

    Raises:
        ValueError: If an N is odd or < 2, or ``repeats < 1``.
    """
    bad = [n for n in batch_sizes if n < 2 or n % 2]
    if bad:
        raise ValueError(f'batch sizes must be even and >= 2 (two equal '
                         f'halves), got {bad}')
    if repeats < 1:
        raise ValueError(f'repeats must be >= 1, got {repeats}')
    layout = layout or module_layout(model)
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
                values = [
                    getattr(run, key)[i].item() if run.valid[i] else math.nan
                    for run in runs
                ]
                mean, std = summarize(values)
                row[key][name] = dict(mean=mean, std=std, values=values)
        rows.append(row)
    return rows
