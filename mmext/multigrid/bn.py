"""Sub-batch BN and precise BN for multigrid (paper Sec. 3.3).

BN statistics are kept over a fixed number of clips per split
(``bn_base_size``) whatever the per-device batch: larger batches run
mmaction2's :class:`~mmaction.models.common.SubBatchNorm3D` with
``num_splits = batch / bn_base_size`` (PySlowFast ``update_long_cycle``).
Swapped modules share the ``weight``/``bias`` Parameter objects with the
original BN layer, so the optimizer and DDP keep training the same tensors,
and checkpoints are written with the original layer's keys.

BN kinds. ``BatchNorm3d``, ``SyncBatchNorm`` (mmcv's ``SyncBN``) and
mmengine's BatchNormXd (``SyncBN`` after ``revert_sync_batchnorm`` in a
non-distributed run) are split; the split statistics are kept in a layer of
the same kind, so a ``SyncBatchNorm`` stays synchronised over its process
group: split ``k`` of every rank is normalised together. A recipe that syncs
BN over ``W`` ranks of ``B`` clips therefore keeps BN over ``W *
bn_base_size`` clips at every multigrid shape, the fixed BN batch the method
asks for (with ``bn_base_size = B``, exactly the recipe's). Other kinds with
batch statistics (``BatchNorm1d``/``2d``, mmcv's ``MMSyncBN``) cannot be
split, because their batch dimension need not be the clips; layers that the
recipe keeps in eval mode (``norm_eval``, ``frozen_stages``) do not depend on
the batch and are left alone. GroupNorm/LayerNorm need nothing.
"""
from typing import Callable, Dict, Iterable, List, Set, Tuple

import torch
import torch.nn as nn
from mmaction.models.common import SubBatchNorm3D
from mmengine.dist import all_reduce_params
from mmext.compat import BatchNormBase, InstanceNormBase, batch_norm_xd_type

__all__ = [
    'SPLITTABLE_BN_TYPES', 'set_sub_bn_splits', 'aggregate_sub_bn_stats',
    'to_plain_bn_state_dict', 'update_precise_bn', 'unsplittable_bn_layers',
    'bn_layers_in_training', 'modules_training_in_train_mode'
]

# Exact types: a subclass may take other constructor arguments.
SPLITTABLE_BN_TYPES = (nn.BatchNorm3d, nn.SyncBatchNorm, batch_norm_xd_type())


def modules_training_in_train_mode(model: nn.Module) -> Set[nn.Module]:
    """Modules that ``model.train()`` puts in training mode.

    Recipes decide per layer in their ``train()`` (mmaction2's ResNet3d
    family puts BN layers in eval mode for ``norm_eval=True`` and the stages
    up to ``frozen_stages``). Every module's mode is restored afterwards.

    Args:
        model (nn.Module): The unwrapped model.

    Returns:
        set[nn.Module]: The modules in training mode under ``model.train()``.
    """
    modes = [(m, m.training) for m in model.modules()]
    model.train()
    training = {m for m in model.modules() if m.training}
    for module, mode in modes:
        module.training = mode
    return training


def _has_batch_stats(module: nn.Module) -> bool:
    """Whether ``module`` normalises with statistics over the batch."""
    if isinstance(module, BatchNormBase):
        return True
    # Duck-typed for BN layers outside torch's hierarchy (mmcv's MMSyncBN);
    # instance norm keeps running statistics but of single samples.
    buffers = dict(module.named_buffers(recurse=False))
    return not isinstance(module, InstanceNormBase) and {
        'running_mean', 'running_var'} <= set(buffers)


def _bn_layers(model: nn.Module) -> Iterable:
    """``(name, module)`` of BN layers, sub-BN modules counting as one."""
    inner = set()
    for name, module in model.named_modules():
        if module in inner:
            continue
        if isinstance(module, SubBatchNorm3D):
            inner.update((module.bn, module.split_bn))
            yield name, module
        elif _has_batch_stats(module):
            yield name, module


def bn_layers_in_training(model: nn.Module) -> List[Tuple[str, nn.Module]]:
    """``(name, module)`` of the BN layers that ``model.train()`` trains.

    Layers with batch statistics (a ``SubBatchNorm3D`` counts as one) in
    training mode under ``model.train()``, i.e. not frozen by the recipe.
    """
    training = modules_training_in_train_mode(model)
    return [(n, m) for n, m in _bn_layers(model) if m in training]


def unsplittable_bn_layers(model: nn.Module) -> List[str]:
    """BN layers that train but that sub-batch BN cannot split.

    Args:
        model (nn.Module): The unwrapped model.

    Returns:
        list[str]: ``'name (Type)'`` of every layer of
        :func:`bn_layers_in_training` that is not of a kind in
        ``SPLITTABLE_BN_TYPES`` (e.g. ``BatchNorm1d`` in a head).
    """
    return _unsplittable(bn_layers_in_training(model))


def _unsplittable(layers: List[Tuple[str, nn.Module]]) -> List[str]:
    return [
        f'{name} ({type(m).__name__})' for name, m in layers
        if not isinstance(m, SubBatchNorm3D)
        and type(m) not in SPLITTABLE_BN_TYPES
    ]


def _like(bn: BatchNormBase, num_features: int) -> BatchNormBase:
    """A non-affine BN layer of ``bn``'s kind, device and dtype."""
    stats = bn.running_mean if bn.running_mean is not None else bn.weight
    kwargs = dict(eps=bn.eps, momentum=bn.momentum, affine=False,
                  track_running_stats=bn.track_running_stats)
    if stats is not None:
        kwargs.update(device=stats.device, dtype=stats.dtype)
    if isinstance(bn, nn.SyncBatchNorm):
        kwargs['process_group'] = bn.process_group
    return type(bn)(num_features, **kwargs)


def _make_bn(old: nn.Module, num_splits: int) -> nn.Module:
    """A BN module with ``num_splits`` splits taking over ``old``'s state.

    Created directly on ``old``'s device and dtype; every split starts from
    the (aggregated) statistics of ``old``.
    """
    bn = old.bn if isinstance(old, SubBatchNorm3D) else old
    if num_splits == 1:
        new = _like(bn, bn.num_features)
        targets = [(new, 1)]
    else:
        # Its own BatchNorm3d layers are placeholders (on meta, no memory)
        # for ones of bn's kind; affine=False: it would allocate weight/bias.
        new = SubBatchNorm3D(bn.num_features, num_splits=num_splits,
                             affine=False, device='meta')
        new.bn = _like(bn, bn.num_features)
        new.split_bn = _like(bn, bn.num_features * num_splits)
        targets = [(new.bn, 1), (new.split_bn, num_splits)]
    for target, repeat in targets:
        for name, buf in bn.named_buffers(recurse=False):
            getattr(target, name).copy_(
                buf.repeat(repeat) if buf.dim() else buf)
    new.affine = old.affine
    if old.affine:
        new.weight, new.bias = old.weight, old.bias
    new.train(old.training)
    return new


def set_sub_bn_splits(model: nn.Module, num_splits: int) -> int:
    """Split the BN layers that train into ``num_splits`` sub-batches.

    Sub-BN statistics are aggregated first, so no running statistics are
    lost; ``num_splits == 1`` restores layers of the original kind. Layers in
    eval mode under ``model.train()`` (frozen by the recipe) stay as they are.

    Args:
        model (nn.Module): Unwrapped model, edited in place.
        num_splits (int): Splits of the per-device batch ``N`` of
            ``(N, C, T, H, W)`` inputs; ``N`` must be divisible by it.

    Returns:
        int: Number of modules replaced.

    Raises:
        ValueError: For ``num_splits > 1`` if a BN layer that trains is of a
            kind that cannot be split (see :func:`unsplittable_bn_layers`).
    """
    aggregate_sub_bn_stats(model)
    if num_splits > 1:
        layers = bn_layers_in_training(model)
        bad = _unsplittable(layers)
        if bad:
            raise ValueError(
                f'Sub-batch BN cannot split the BN layers {bad}: only '
                f'{[t.__name__ for t in SPLITTABLE_BN_TYPES]} are split.')
        trained = {m for _, m in layers}
        swaps = [(n, m) for n, m in _bn_layers(model)
                 if getattr(m, 'num_splits', 1) != num_splits and (
                     isinstance(m, SubBatchNorm3D) or m in trained)]
    else:
        swaps = [(n, m) for n, m in _bn_layers(model)
                 if isinstance(m, SubBatchNorm3D)]
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
        int: Number of aggregated modules (those tracking statistics).
    """
    subs = [m for m in model.modules() if isinstance(m, SubBatchNorm3D)
            and m.split_bn.track_running_stats]
    for m in subs:
        m.aggregate_stats()
    return len(subs)


def to_plain_bn_state_dict(model: nn.Module,
                           state_dict: Dict[str, torch.Tensor]) -> None:
    """Rewrite sub-BN entries of ``state_dict`` as the original BN's keys.

    Call after :func:`aggregate_sub_bn_stats`; ``prefix.bn.running_mean``
    becomes ``prefix.running_mean`` and ``prefix.split_bn.*`` is dropped, so
    the checkpoint loads into the unmodified recipe model.

    Args:
        model (nn.Module): The model the state dict was taken from (unwrapped).
        state_dict (dict): Edited in place.
    """
    for name, module in _bn_layers(model):
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
    """Recompute the statistics of the BN layers that train, exactly.

    Precise BN (PySlowFast ``calculate_and_update_precise_bn``, fvcore
    ``update_bn_stats``): with ``momentum=None`` torch keeps the cumulative
    average of the batch statistics, i.e. their exact mean over the batches.
    The passes run in the mode ``model.train()`` gives, so layers the recipe
    keeps in eval mode (``norm_eval``, ``frozen_stages``) normalise with, and
    keep bit for bit, their own statistics; as in fvcore only layers in
    training mode are updated. Sub-BN statistics are aggregated afterwards
    and, with several processes, the updated statistics are averaged across
    ranks (one coalesced all-reduce per dtype on the buffers' own device;
    mmengine moves it to the backend's device if that differs).

    Args:
        model (nn.Module): Unwrapped model; its modes are restored after.
        batches (Iterable): Data batches (already limited in number).
        forward (callable): Runs one batch through ``model`` (no backward).

    Returns:
        int: Number of batches used; 0 without a BN layer that trains (no
        forward pass is run then).
    """
    was_training = model.training
    model.train()
    bns = [m for m in model.modules() if isinstance(m, BatchNormBase)
           and m.training and m.track_running_stats]
    if not bns:
        model.train(was_training)
        return 0
    momenta = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    count = 0
    for batch in batches:
        forward(batch)
        count += 1
    for m, momentum in zip(bns, momenta):
        m.momentum = momentum
    updated = set(bns)
    for m in model.modules():
        if isinstance(m, SubBatchNorm3D) and m.split_bn in updated:
            m.aggregate_stats()
    all_reduce_params(
        [buf for m in bns for buf in (m.running_mean, m.running_var)],
        op='mean')
    model.train(was_training)
    return count
