"""Sub-batch BN and precise BN for multigrid (paper Sec. 3.3).

Sub-batch BN (PySlowFast ``NUM_SPLITS``, decided per forward pass) changes
the class of each BN layer that trains to a subclass of its own kind, so
parameters, buffers and state-dict keys stay; the running statistics are the
whole batch's (law of total variance). Which layers and batches can be split
is checked before training (:func:`mmext.multigrid.checks.check_model`, the
plan). Details: docs/en/design.md#multigrid."""
from typing import Callable, Iterable, List, Tuple

import torch
import torch.distributed as torch_dist
import torch.nn as nn
from mmaction.models.common import SubBatchNorm3D
from mmengine.dist import all_reduce_params
from mmext.compat import BatchNormBase, InstanceNormBase, batch_norm_xd_type

__all__ = [
    'SPLITTABLE_BN_TYPES', 'SubBatchNorm', 'enable_sub_bn', 'disable_sub_bn',
    'update_precise_bn', 'unsplittable_bn_layers', 'bn_layers_in_training'
]

# Exact types: a subclass may take other constructor arguments.
SPLITTABLE_BN_TYPES = (nn.BatchNorm3d, nn.SyncBatchNorm, batch_norm_xd_type())


class SubBatchNorm:
    """Sub-batch BN mixed into a BN layer of a splittable kind.

    In training, ``N > bn_base_size`` clips are normalised in
    ``N // bn_base_size`` splits of consecutive clips (PySlowFast
    ``SubBatchNorm3d``); otherwise the layer's own ``forward`` runs.

    Attributes:
        bn_base_size (int): Clips per split, set by :func:`enable_sub_bn`.
        plain_type (type): The BN kind this class extends.
    """

    bn_base_size: int
    plain_type: type

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise a batch, in splits of ``bn_base_size`` clips in training.

        Args:
            x (torch.Tensor): Features of shape ``(N, C, T, H, W)``, any memory
                format; in training an ``N`` above ``bn_base_size`` is a
                multiple of it.

        Returns:
            torch.Tensor: The normalised features, shape and memory format of
            ``x``.
        """
        n, base = x.shape[0], self.bn_base_size
        if not self.training or n <= base:
            return super().forward(x)
        splits = n // base
        if self._synchronised():
            return self._synchronised_forward(x, splits)
        outs, means, invstds = [], [], []
        for chunk in x.chunk(splits):
            # torch's own kernel: one fused pass, float32 statistics.
            out, mean, invstd = torch.native_batch_norm(
                chunk, self.weight, self.bias, None, None, True, 0.0,
                self.eps)
            outs.append(out)
            means.append(mean)
            invstds.append(invstd)
        if self.track_running_stats:
            with torch.no_grad():
                means = torch.stack(means)
                variances = torch.stack(invstds).pow(-2) - self.eps
                mean = means.mean(0)
                variance = variances.mean(0) + (means - mean).pow(2).mean(0)
                self._track(mean, variance, x.numel() // x.shape[1])
        return torch.cat(outs)

    def _synchronised(self) -> bool:
        """Whether this is a SyncBatchNorm that syncs (as its forward)."""
        if not isinstance(self, nn.SyncBatchNorm) or not (
                torch_dist.is_available() and torch_dist.is_initialized()):
            return False
        return torch_dist.get_world_size(self._group()) > 1

    def _group(self):
        return self.process_group or torch_dist.group.WORLD

    def _synchronised_forward(self, x: torch.Tensor,
                              splits: int) -> torch.Tensor:
        """Split ``k`` of every rank normalised together; running statistics
        of the whole synchronised batch."""
        outs, tracked = [], self.track_running_stats
        self.track_running_stats = False  # batch statistics, buffers kept
        try:
            for chunk in x.chunk(splits):
                outs.append(super().forward(chunk))
        finally:
            self.track_running_stats = tracked
        if self.track_running_stats:
            with torch.no_grad():
                dims = [0] + list(range(2, x.dim()))
                variance, mean = torch.var_mean(x.float(), dim=dims,
                                                correction=0)
                count = x.numel() // x.shape[1]
                moments = torch.cat([
                    mean * count, (variance + mean**2) * count,
                    mean.new_full((1, ), count)
                ]).double()
                torch_dist.all_reduce(moments, group=self._group())
                c = mean.numel()
                total = moments[-1]
                mean = moments[:c] / total
                variance = moments[c:2 * c] / total - mean**2
                self._track(mean, variance, int(total.item()))
        return torch.cat(outs)

    def _track(self, mean: torch.Tensor, variance: torch.Tensor,
               count: int) -> None:
        """Momentum update, as torch's BN, from a ``(C,)`` mean and biased
        variance over ``count`` values per channel."""
        self.num_batches_tracked.add_(1)
        dtype = self.running_mean.dtype
        factor = self.momentum
        if factor is None:  # cumulative average
            factor = 1.0 / self.num_batches_tracked.to(dtype)
        self.running_mean.lerp_(mean.to(dtype), factor)
        self.running_var.lerp_(
            (variance * (count / max(count - 1, 1))).to(dtype), factor)

    def extra_repr(self) -> str:
        """The layer's ``repr`` fields, with ``bn_base_size``.

        Returns:
            str: The plain kind's fields, then ``bn_base_size=...``.
        """
        return f'{super().extra_repr()}, bn_base_size={self.bn_base_size}'


class SubBatchNorm3d(SubBatchNorm, nn.BatchNorm3d):
    """``BatchNorm3d`` with sub-batch BN (see :class:`SubBatchNorm`)."""
    plain_type = nn.BatchNorm3d


class SubSyncBatchNorm(SubBatchNorm, nn.SyncBatchNorm):
    """``SyncBatchNorm`` with sub-batch BN (see :class:`SubBatchNorm`)."""
    plain_type = nn.SyncBatchNorm


class SubBatchNormXd(SubBatchNorm, batch_norm_xd_type()):
    """mmengine's reverted ``SyncBN`` with sub-batch BN (see
    :class:`SubBatchNorm`)."""
    plain_type = batch_norm_xd_type()


_SUB_TYPES = {t.plain_type: t
              for t in (SubBatchNorm3d, SubSyncBatchNorm, SubBatchNormXd)}


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
    """``(name, module)`` of BN layers (a ``SubBatchNorm3D`` counts as one)."""
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
    """The BN layers that ``model.train()`` puts in training mode.

    Honours ``norm_eval`` and ``frozen_stages``; the modules' modes are
    restored.

    Args:
        model (nn.Module): The unwrapped model.

    Returns:
        list[tuple[str, nn.Module]]: ``(name, module)`` of each such layer.
    """
    modes = [(m, m.training) for m in model.modules()]
    model.train()
    training = {m for m in model.modules() if m.training}
    for module, mode in modes:
        module.training = mode
    return [(n, m) for n, m in _bn_layers(model) if m in training]


def _splittable(module: nn.Module) -> bool:
    return isinstance(module, SubBatchNorm) or (
        type(module) in SPLITTABLE_BN_TYPES)


def unsplittable_bn_layers(model: nn.Module) -> List[str]:
    """The BN layers that train but that sub-batch BN cannot split.

    Args:
        model (nn.Module): The unwrapped model.

    Returns:
        list[str]: ``'name (Type)'`` of each layer of no kind in
        :data:`SPLITTABLE_BN_TYPES` (e.g. ``BatchNorm1d`` in a head).
    """
    return [f'{name} ({type(m).__name__})'
            for name, m in bn_layers_in_training(model) if not _splittable(m)]


def enable_sub_bn(model: nn.Module, bn_base_size: int) -> int:
    """Give every splittable BN layer that trains sub-batch BN.

    Only module classes change: parameters, buffers and state dict keys are
    the recipe's.

    Args:
        model (nn.Module): The unwrapped model.
        bn_base_size (int): Clips per split.

    Returns:
        int: Number of layers with sub-batch BN.
    """
    layers = [m for _, m in bn_layers_in_training(model) if _splittable(m)]
    for module in layers:
        if not isinstance(module, SubBatchNorm):
            module.__class__ = _SUB_TYPES[type(module)]
        module.bn_base_size = int(bn_base_size)
    return len(layers)


def disable_sub_bn(model: nn.Module) -> int:
    """Give every sub-batch BN layer back its plain kind.

    Args:
        model (nn.Module): The unwrapped model.

    Returns:
        int: Number of layers changed back.
    """
    subs = [m for m in model.modules() if isinstance(m, SubBatchNorm)]
    for module in subs:
        module.__class__ = module.plain_type
        del module.bn_base_size
    return len(subs)


@torch.no_grad()
def update_precise_bn(model: nn.Module, batches: Iterable,
                      forward: Callable[[object], None]) -> int:
    """Recompute the statistics of the BN layers that train.

    The population mean and variance of their inputs over ``batches``:
    precise BN (PySlowFast ``calculate_and_update_precise_bn``) as fvcore's
    ``update_bn_stats`` estimates it (``_PopulationVarianceEstimator``; Wu &
    Johnson, "Rethinking Batch in BatchNorm", 2021, Appendix): with
    ``momentum=1`` each layer's buffers hold the last batch's statistics;
    weighted by the ``N T H W`` values per channel of each batch they give
    ``E[x]`` and ``Var[x] = E[x^2] - E[x]^2`` (the mean of the batch
    variances plus the variance of the batch means; averaging only the batch
    variances is low when batches differ in mean). Passes run in the modes
    ``model.train()`` gives; only layers in training mode that see a batch
    are updated. Across ranks ``E[x]`` and ``E[x^2]`` are averaged (equal
    batches per rank), so the variance covers all ranks.

    Args:
        model (nn.Module): The unwrapped model; its modes are restored after.
        batches (Iterable): The batches, already limited in number.
        forward (Callable[[object], None]): Runs one batch through ``model``.

    Returns:
        int: The batches used; 0 (and no pass) without a BN layer that
        trains.
    """
    was_training = model.training
    model.train()
    bns = [m for m in model.modules() if isinstance(m, BatchNormBase)
           and m.training and m.track_running_stats]
    if not bns:
        model.train(was_training)
        return 0
    momenta = [m.momentum for m in bns]
    sizes = {}  # layer -> values per channel of its input this pass

    def record(module, args):
        sizes[module] = args[0].numel() // args[0].shape[1]

    handles = [m.register_forward_pre_hook(record) for m in bns]
    sums = {m: [0, 0, 0] for m in bns}  # values, sum of x, sum of x^2
    for m in bns:
        m.momentum = 1.0
    count = 0
    for batch in batches:
        sizes.clear()
        forward(batch)
        count += 1
        for m, n in sizes.items():
            # running_var is Bessel-corrected (n - 1 in its denominator).
            sums[m] = [sums[m][0] + n, sums[m][1] + n * m.running_mean,
                       sums[m][2] + n * m.running_mean.square() +
                       (n - 1) * m.running_var]
    for handle in handles:
        handle.remove()
    # As moments E[x], E[x^2] (a layer that saw no batch keeps its own) for
    # the mean over ranks, then back to the variance.
    for m, momentum in zip(bns, momenta):
        m.momentum = momentum
        n, x, x2 = sums[m]
        if n:
            m.running_mean.copy_(x / n)
            m.running_var.copy_(x2 / n)
            m.num_batches_tracked.fill_(count)
        else:
            m.running_var.add_(m.running_mean.square())
    all_reduce_params(
        [buf for m in bns for buf in (m.running_mean, m.running_var)],
        op='mean')
    for m in bns:
        m.running_var.sub_(m.running_mean.square())
    for m in model.modules():
        # A recipe's own mmaction2 SubBatchNorm3D evaluates with its bn
        # (law of total variance over its splits).
        if isinstance(m, SubBatchNorm3D) and m.split_bn in bns:
            m.aggregate_stats()
    model.train(was_training)
    return count
