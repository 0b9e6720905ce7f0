"""AGVM's gradient variance d_i of a model for two halves of a batch,
without training it (paper Sec. 3, Fig. 1): the code of
``tools/analysis/agvm_variance.py`` and
``.dev_scripts/benchmark/agvm_large_batch.py``.

It uses the constructor's grouping, the wrapper's flat layout, norms and
statistics (:mod:`mmext.agvm`), so d_i is what ``AGVMOptimWrapper`` would
see. Callers check the batch sizes and repeats.
"""
import math
import statistics
from contextlib import contextmanager
from typing import Callable, Dict, List, Sequence

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


def module_layout(model: nn.Module,
                  module_names: Sequence[str] = None) -> GradientLayout:
    """The wrapper's flat layout of ``model``'s trainable parameters;
    ``module_names`` (anchor first; None: the top-level modules) checked as
    the constructor checks them."""
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


def measure_gradient_variance(model: nn.Module, half_a: Sequence,
                              half_b: Sequence, layout: GradientLayout,
                              ratio_range=DEFAULT_RATIO_RANGE,
                              loss_fn: LossFn = mmengine_loss
                              ) -> Dict[str, Tensor]:
    """d_i between the mean gradients of two halves (lists of micro-batches,
    other images in each) of a batch, in training mode; the model's state
    is restored and its weights never written.

    Returns:
        dict[str, Tensor]: Shape (M,) each: ``d`` = 1 - cos(G_A, G_B);
        ``valid``, False where a half's gradient is zero or non-finite;
        ``ratio`` = d_anchor / d_i (NaN where undefined); ``mu`` =
        sqrt(clamp(ratio, *ratio_range)).
    """
    with _preserved_state(model):
        model.train()
        grad_a = _accumulate_half(model, layout, half_a, loss_fn)
        grad_b = _accumulate_half(model, layout, half_b, loss_fn)
        # As the wrapper's exchange: the dot product from three norms.
        sq_a = layout.segment_sq_norms(layout.params, grad_a)
        sq_b = layout.segment_sq_norms(layout.params, grad_b)
        sq_sum = layout.segment_sq_norms(layout.params, grad_a.add_(grad_b))
    d, valid = gradient_variance(
        HalfStatistics(half_dot_from_norms(sq_sum, sq_a, sq_b), sq_a, sq_b))
    ok = valid & valid[0] & (d > 0)
    ratio = torch.where(ok, d[0] / torch.where(ok, d, 1.0), math.nan)
    return dict(d=d, valid=valid, ratio=ratio,
                mu=modulation_factors(d, valid, 0, ratio_range))


def summarize(values: Sequence[float]) -> Dict[str, object]:
    """``mean``, sample ``std`` (NaN for one value) of the finite values
    (both NaN for none), and the ``values``."""
    finite = [v for v in values if math.isfinite(v)]
    return dict(mean=statistics.fmean(finite) if finite else math.nan,
                std=statistics.stdev(finite) if len(finite) > 1 else math.nan,
                values=list(values))


def variance_by_batch_size(model: nn.Module,
                           draw_half: Callable[[int], Sequence],
                           batch_sizes: Sequence[int], repeats: int,
                           layout: GradientLayout,
                           ratio_range=DEFAULT_RATIO_RANGE,
                           loss_fn: LossFn = mmengine_loss) -> List[Dict]:
    """d_i, d_anchor / d_i and mu_i against the total batch size N (even).

    ``draw_half(images)`` returns micro-batches of that many fresh images;
    it is called twice per N and repeat.

    Returns:
        list[dict]: One per N: ``batch_size``, ``repeats`` and, for each of
        ``'d'``, ``'ratio'``, ``'mu'``, module name -> :func:`summarize` of
        the R values (NaN where a measurement is not valid).
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
            row[key] = {
                name: summarize([
                    run[key][i].item() if run['valid'][i] else math.nan
                    for run in runs
                ])
                for i, name in enumerate(layout.module_names)
            }
        rows.append(row)
    return rows
