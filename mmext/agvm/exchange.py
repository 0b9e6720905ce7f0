"""Collect the two halves' gradient statistics for AGVM.

Two sources of halves, both producing :class:`mmext.agvm.HalfStatistics`:

* :class:`DistributedHalves` (world size >= 2): the first and second half of
  the ranks. On re-estimation steps the wrapper keeps DDP from reducing
  (``no_sync``) and this class reduces instead, on whole flattened buffers:
  one all-reduce inside each half, then one world all-reduce that produces
  the usual global gradient and carries the per-module squared norms of the
  half sums. The cross-half dot product follows from the norms
  (:func:`mmext.agvm.half_dot_from_norms`), so beyond the gradient itself
  only per-module scalars cross the halves.
* :class:`AccumulationHalves` (single process, ``accumulative_counts`` even):
  the first vs the second half of the accumulated micro-batches.
"""
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor
from torch.optim import Optimizer

from .modules import OTHERS
from .statistics import HalfStatistics, half_dot_from_norms, split_ranks

__all__ = ['GradientLayout', 'DistributedHalves', 'AccumulationHalves']

# Maps a flat gradient buffer to the vector whose cosine AGVM measures
# (identity for SGD, the Adam preconditioning otherwise).
Preconditioner = Callable[[Tensor], Tensor]


class GradientLayout:
    """The optimizer's parameters laid out module by module in one buffer.

    Module i (in ``module_names`` order, then ``'others'``) occupies one
    contiguous segment, so per-module sums are slices of one flat tensor.
    The layout depends only on the param groups, hence is the same on every
    rank, which keeps the exchange aligned whatever gradients are missing.

    Args:
        optimizer (Optimizer): Param groups tagged with ``'agvm_module'`` by
            :class:`AGVMOptimWrapperConstructor`.
        module_names (Sequence[str]): Modulated modules, anchor first.

    Raises:
        ValueError: If a group is untagged, or tagged with an unknown module,
            or if a listed module has no parameter in the optimizer.
    """

    def __init__(self, optimizer: Optimizer, module_names: Sequence[str]):
        self.module_names = list(module_names)
        index = {name: i for i, name in enumerate(self.module_names)}
        index[OTHERS] = len(self.module_names)
        per_module: List[List[Tensor]] = [[] for _ in index]
        self.group_modules: List[int] = []
        for group in optimizer.param_groups:
            if 'agvm_module' not in group:
                raise ValueError(
                    'AGVMOptimWrapper needs param groups tagged by module; '
                    "set constructor='mmext.AGVMOptimWrapperConstructor' in "
                    'optim_wrapper')
            if group['agvm_module'] not in index:
                raise ValueError(
                    f"param group tagged {group['agvm_module']!r}, which is "
                    f'not in module_names {self.module_names}')
            self.group_modules.append(index[group['agvm_module']])
            per_module[index[group['agvm_module']]].extend(group['params'])
        empty = [n for n, params in zip(self.module_names, per_module)
                 if not params]
        if empty:
            raise ValueError(
                f'module_names {empty} own no trainable parameter in the '
                f'optimizer (frozen, or every parameter belongs to a more '
                f'specific listed name), so their gradient variance is '
                f'undefined; remove them from module_names')
        self.params = [p for params in per_module for p in params]
        sizes = [sum(p.numel() for p in params) for params in per_module]
        offsets = [0]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        self.bounds = list(zip(offsets[:-1], offsets[1:]))
        self.numel = offsets[-1]

    @property
    def num_modules(self) -> int:
        """M, the number of modulated modules (``'others'`` excluded)."""
        return len(self.module_names)

    def flatten(self, extra: int = 0) -> Tuple[Tensor, Tensor]:
        """Copy the gradients into one float32 buffer.

        Args:
            extra (int): Zeroed slots appended after the gradients, so that
                scalars can ride in the same collective without a copy.

        Returns:
            tuple[Tensor, Tensor]: The buffer, shape (numel + extra,), with
            zeros for parameters whose grad is None, and a float32 mask,
            shape (num_params,), 1 where the grad exists.
        """
        flat = torch.zeros(self.numel + extra, dtype=torch.float32)
        offset = 0
        for param in self.params:
            if param.grad is not None:
                flat[offset:offset + param.numel()].copy_(
                    param.grad.reshape(-1))
            offset += param.numel()
        used = torch.tensor([p.grad is not None for p in self.params],
                            dtype=torch.float32)
        return flat, used

    def write_grads(self, flat: Tensor, used: Tensor) -> None:
        """Set each parameter's grad from ``flat`` (None where unused).

        Args:
            flat (Tensor): Shape (numel,).
            used (Tensor): Shape (num_params,); grads stay None where 0, as
                DDP leaves a parameter unused on every rank.
        """
        offset = 0
        for param, is_used in zip(self.params, used.tolist()):
            chunk = flat[offset:offset + param.numel()].view_as(param)
            offset += param.numel()
            if not is_used:
                param.grad = None
            elif param.grad is None:
                param.grad = chunk.to(param.dtype).clone()
            else:
                param.grad.copy_(chunk)

    def module_dot(self, a: Tensor, b: Tensor) -> Tensor:
        """Per-module dot products of two flat buffers, float64, shape (M,)."""
        return torch.stack([
            _dot64(a[lo:hi], b[lo:hi])
            for lo, hi in self.bounds[:self.num_modules]
        ])

    def module_sq_norm(self, flat: Tensor) -> Tensor:
        """Per-module squared norms of a flat buffer, float64, shape (M,)."""
        return self.module_dot(flat, flat)


def _dot64(a: Tensor, b: Tensor, chunk: int = 4096) -> Tensor:
    """Float64-accurate dot product of float32 vectors at float32 speed.

    A single float32 dot over 10^7 elements is off by ~1e-4 relative, too
    much for d_i ~ 1e-3 and the norm identity; converting to float64 costs
    5x. Float32 dots of short chunks summed in float64 are accurate to
    ~1e-9 relative.
    """
    main = a.numel() // chunk * chunk
    head = torch.bmm(a[:main].view(-1, 1, chunk),
                     b[:main].view(-1, chunk, 1)).double().sum()
    return head + torch.dot(a[main:].double(), b[main:].double())


def _split_float64(values: Tensor) -> Tensor:
    """Encode float64 values as float32 (high, low) pairs, shape (2 * N,).

    Lets the scalars ride in the float32 gradient all-reduce without losing
    the precision the norm identity needs; exact because only one rank per
    half contributes non-zeros.
    """
    high = values.float()
    low = (values - high.double()).float()
    return torch.cat([high, low])


def _join_float64(pairs: Tensor) -> Tensor:
    high, low = pairs.double().chunk(2)
    return high + low


class DistributedHalves:
    """Half-group reduction for AGVM re-estimation steps in DDP.

    Creates the two half process groups (``torch.distributed.new_group``, a
    collective: every rank must build this object in the same order).

    Args:
        layout (GradientLayout): The flat gradient layout.
        world_size (int): Number of ranks, >= 2.
        rank (int): This process' rank.
    """

    def __init__(self, layout: GradientLayout, world_size: int, rank: int):
        self.layout = layout
        self.world_size = world_size
        ranks_a, ranks_b = split_ranks(world_size)
        self.groups = [dist.new_group(ranks_a), dist.new_group(ranks_b)]
        halves = [ranks_a, ranks_b]
        self.side: Optional[int] = next(
            (i for i, ranks in enumerate(halves) if rank in ranks), None)
        # One rank per half feeds the half sum into the world reduction.
        self.is_leader = self.side is not None and rank == halves[
            self.side][0]
        self.extra_rank = 2 * len(ranks_a) if world_size % 2 else None
        self.rank = rank

    def reduce_and_measure(self, precondition: Preconditioner
                           ) -> HalfStatistics:
        """Average the gradients over all ranks and measure the halves.

        Writes the world-mean gradient into every ``param.grad`` (what DDP
        would have done) and returns statistics identical on every rank.

        Args:
            precondition (Preconditioner): Applied before measuring.

        Returns:
            HalfStatistics: Per-module statistics of the half sums S_A, S_B.
        """
        layout, num_modules = self.layout, self.layout.num_modules
        num_params = len(layout.params)
        buffer, used = layout.flatten(extra=num_params + 4 * num_modules)
        grads = buffer[:layout.numel]
        # Only the rank outside both halves needs its own gradient later.
        local = grads.clone() if self.side is None else None
        half_norms = torch.zeros(2, num_modules, dtype=torch.float64)
        if self.side is not None:
            dist.all_reduce(grads, group=self.groups[self.side])
            if self.is_leader:
                half_norms[self.side] = layout.module_sq_norm(
                    precondition(grads))
            else:
                grads.zero_()
        buffer[layout.numel:layout.numel + num_params] = used
        buffer[layout.numel + num_params:] = _split_float64(
            half_norms.flatten())
        dist.all_reduce(buffer)
        used = buffer[layout.numel:layout.numel + num_params]
        sq_a, sq_b = _join_float64(
            buffer[layout.numel + num_params:]).view(2, num_modules)
        sq_sum = self._halves_sum_sq_norm(grads, local, precondition)
        layout.write_grads(grads / self.world_size, used)
        return HalfStatistics(
            dot=half_dot_from_norms(sq_sum, sq_a, sq_b),
            sq_norm_a=sq_a,
            sq_norm_b=sq_b)

    def _halves_sum_sq_norm(self, total: Tensor, local: Optional[Tensor],
                            precondition: Preconditioner) -> Tensor:
        """|S_A + S_B|^2 per module.

        With an even world size that is the total. With an odd one the
        total also holds the extra rank's gradient, which only that rank
        knows: it sends |total - own|^2 (M scalars, one small all-reduce).
        """
        if self.extra_rank is None:
            return self.layout.module_sq_norm(precondition(total))
        sq_sum = torch.zeros(self.layout.num_modules, dtype=torch.float64)
        if self.rank == self.extra_rank:
            sq_sum = self.layout.module_sq_norm(precondition(total - local))
        dist.all_reduce(sq_sum)
        return sq_sum


class AccumulationHalves:
    """First vs second half of the accumulated micro-batches (one process).

    Args:
        layout (GradientLayout): The flat gradient layout.
        accumulative_counts (int): K, even and >= 2.
    """

    def __init__(self, layout: GradientLayout, accumulative_counts: int):
        self.layout = layout
        self.half = accumulative_counts // 2
        self._snapshot: Dict[int, Tensor] = {}

    def after_backward(self, step: int, micro_batches_done: int) -> None:
        """Keep the gradient sum of the first half of step ``step``.

        Args:
            step (int): Optimizer step index.
            micro_batches_done (int): Backward passes done in this step.
        """
        if micro_batches_done == self.half:
            self._snapshot = {step: self.layout.flatten()[0]}

    def measure(self, step: int, precondition: Preconditioner
                ) -> Optional[HalfStatistics]:
        """Statistics of the two halves of step ``step``.

        Returns:
            HalfStatistics or None: None if the first half was not seen
            (e.g. a run resumed in the middle of an accumulation window).
        """
        first = self._snapshot.pop(step, None)
        if first is None:
            return None
        total = self.layout.flatten()[0]
        half_a = precondition(first)
        half_b = precondition(total - first)
        return HalfStatistics(
            dot=self.layout.module_dot(half_a, half_b),
            sq_norm_a=self.layout.module_sq_norm(half_a),
            sq_norm_b=self.layout.module_sq_norm(half_b))
