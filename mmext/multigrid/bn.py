"""Sub-batch BN and precise BN for multigrid (paper Sec. 3.3).

BN statistics are kept over a fixed number of clips per split
(``bn_base_size``) whatever the per-device batch: larger batches run
mmaction2's :class:`~mmaction.models.common.SubBatchNorm3D` with
``num_splits = batch / bn_base_size`` (PySlowFast ``update_long_cycle``).
Swapped modules share the ``weight``/``bias`` Parameter objects with the
original ``BatchNorm3d``, so the optimizer and DDP keep training the same
tensors, and checkpoints are written with plain ``BatchNorm3d`` keys.
"""
from typing import Callable, Dict, Iterable

import torch
import torch.nn as nn
from mmaction.models.common import SubBatchNorm3D
from mmengine.dist import all_reduce, get_world_size

__all__ = [
    'set_sub_bn_splits', 'aggregate_sub_bn_stats', 'to_plain_bn_state_dict',
    'update_precise_bn'
]


def _make_bn(old: nn.Module, num_splits: int) -> nn.Module:
    """A BN module with ``num_splits`` splits taking over ``old``'s state."""
    bn = old.bn if isinstance(old, SubBatchNorm3D) else old
    kwargs = dict(eps=bn.eps, momentum=bn.momentum,
                  track_running_stats=bn.track_running_stats)
    device = bn.running_mean.device
    if num_splits == 1:
        new = nn.BatchNorm3d(bn.num_features, affine=False, **kwargs)
        new.affine = True
        targets = [(new, 1)]
    else:
        new = SubBatchNorm3D(bn.num_features, num_splits=num_splits,
                             **kwargs)
        # Every split starts from the aggregated statistics.
        targets = [(new.bn, 1), (new.split_bn, num_splits)]
    for target, repeat in targets:
        for name, buf in bn.named_buffers(recurse=False):
            getattr(target, name).copy_(
                buf.repeat(repeat) if buf.dim() else buf)
    new.weight, new.bias = old.weight, old.bias
    return new.to(device)


def _bn_modules(model: nn.Module) -> Iterable:
    for name, module in model.named_modules():
        if isinstance(module, SubBatchNorm3D) or (
                type(module) is nn.BatchNorm3d and module.affine):
            yield name, module


def set_sub_bn_splits(model: nn.Module, num_splits: int) -> int:
    """Make every affine ``BatchNorm3d`` of ``model`` use ``num_splits``.

    Sub-BN statistics are aggregated first, so no running statistics are
    lost; ``num_splits == 1`` restores plain ``BatchNorm3d`` modules.

    Args:
        model (nn.Module): Edited in place (``SyncBatchNorm`` and 2D BN are
            left alone).
        num_splits (int): Splits of the per-device batch ``N`` of
            ``(N, C, T, H, W)`` inputs; ``N`` must be divisible by it.

    Returns:
        int: Number of modules replaced.
    """
    aggregate_sub_bn_stats(model)
    swaps = [(n, m) for n, m in _bn_modules(model)
             if getattr(m, 'num_splits', 1) != num_splits]
    for name, module in swaps:
        parent_name, _, child = name.rpartition('.')
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, _make_bn(module, num_splits))
    return len(swaps)


def aggregate_sub_bn_stats(model: nn.Module) -> int:
    """Merge the split statistics of every ``SubBatchNorm3D`` into its BN.

    Uses mmaction2's ``SubBatchNorm3D.aggregate_stats``: mean of the split
    means and, by the law of total variance for equal splits,
    ``Var = mean(Var_k) + mean((mu_k - mu)^2)``.

    Returns:
        int: Number of aggregated modules.
    """
    subs = [m for m in model.modules() if isinstance(m, SubBatchNorm3D)]
    for m in subs:
        m.aggregate_stats()
    return len(subs)


def to_plain_bn_state_dict(model: nn.Module,
                           state_dict: Dict[str, torch.Tensor]) -> None:
    """Rewrite sub-BN entries of ``state_dict`` as ``BatchNorm3d`` entries.

    Call after :func:`aggregate_sub_bn_stats`; ``prefix.bn.running_mean``
    becomes ``prefix.running_mean`` and ``prefix.split_bn.*`` is dropped, so
    the checkpoint loads into the unmodified recipe model.

    Args:
        model (nn.Module): The model the state dict was taken from (unwrapped).
        state_dict (dict): Edited in place.
    """
    for name, module in _bn_modules(model):
        if not isinstance(module, SubBatchNorm3D):
            continue
        prefix = f'{name}.' if name else ''
        for key in list(state_dict):
            if key.startswith(prefix + 'split_bn.'):
                del state_dict[key]
            elif key.startswith(prefix + 'bn.'):
                state_dict[prefix + key[len(prefix) + 3:]] = \
                    state_dict.pop(key)


@torch.no_grad()
def update_precise_bn(model: nn.Module, batches: Iterable,
                      forward: Callable[[object], None]) -> int:
    """Recompute BN statistics as exact averages over ``batches``.

    Precise BN (PySlowFast ``calculate_and_update_precise_bn``, fvcore
    ``update_bn_stats``): with ``momentum=None`` torch keeps the cumulative
    average of the batch statistics, i.e. their exact mean over the batches.
    Sub-BN statistics are aggregated afterwards and, with several processes,
    averaged across ranks.

    Args:
        model (nn.Module): Unwrapped model; put in train mode for the pass.
        batches (Iterable): Data batches (already limited in number).
        forward (callable): Runs one batch through ``model`` (no backward).

    Returns:
        int: Number of batches used.
    """
    bns = [m for m in model.modules()
           if isinstance(m, nn.modules.batchnorm._BatchNorm)
           and m.track_running_stats]
    momenta = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    was_training = model.training
    model.train()
    count = 0
    for batch in batches:
        forward(batch)
        count += 1
    for m, momentum in zip(bns, momenta):
        m.momentum = momentum
    aggregate_sub_bn_stats(model)
    if get_world_size() > 1:
        for m in bns:
            all_reduce(m.running_mean, op='mean')
            all_reduce(m.running_var, op='mean')
    model.train(was_training)
    return count
