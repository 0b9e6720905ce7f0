"""The gradients laid out by module, and the two halves' statistics.

Both sources of halves, :class:`DistributedHalves` (ranks) and
:class:`AccumulationHalves` (micro-batches of one process), measure the
per-module ``|S_A|^2``, ``|S_B|^2`` and ``|S_A + S_B|^2`` of the half sums, on
the parameters' device. The wrapper calls them; they call nothing back."""
import logging
from contextlib import contextmanager
from typing import (Callable, Dict, Iterator, List, Optional, Sequence,
                    Tuple)

import torch
import torch.distributed as dist
from mmengine.logging import print_log
from torch import Tensor, nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import \
    allreduce_hook
from torch.optim import Optimizer

from .statistics import HalfStatistics, half_dot_from_norms, split_ranks

__all__ = ['GradientLayout', 'DistributedHalves', 'AccumulationHalves']


class GradientLayout:
    """The optimizer's parameters laid out module by module in one buffer.

    Module i (``module_names`` order, then ``'others'``) is one contiguous
    segment; the layout depends on the param groups and on which parameters
    are trainable when it is built only, so it is the same on every rank.
    Frozen parameters stay out (as out of DDP's buckets): kept in the
    optimizer, as mmengine keeps them, for a hook that unfreezes them later,
    but outside AGVM's statistics.

    Args:
        optimizer (Optimizer): Param groups tagged with ``'agvm_module'`` by
            :class:`mmext.agvm.AGVMOptimWrapperConstructor` (trusted: a tag
            outside ``module_names`` is ``'others'``).
        module_names (Sequence[str]): Modulated modules, anchor first.

    Raises:
        ValueError: If the parameters are on several devices.
    """

    def __init__(self, optimizer: Optimizer, module_names: Sequence[str]):
        self.module_names = list(module_names)
        index = {name: i for i, name in enumerate(self.module_names)}
        others = len(self.module_names)
        per_module: List[List[Tensor]] = [[] for _ in range(others + 1)]
        self.group_modules: List[int] = []
        for group in optimizer.param_groups:
            module = index.get(group['agvm_module'], others)
            self.group_modules.append(module)
            per_module[module].extend(
                p for p in group['params'] if p.requires_grad)
        self.params = [p for params in per_module for p in params]
        self._module_of = {
            id(p): i
            for i, params in enumerate(per_module) for p in params
        }
        sizes = [sum(p.numel() for p in params) for params in per_module]
        offsets = [0]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        self.bounds = list(zip(offsets[:-1], offsets[1:]))
        self.numel = offsets[-1]
        # The module runs of each parameter list measured (the layout's,
        # DDP's buckets): the same lists at every re-estimate.
        self._runs: Dict[Tuple[int, ...], List[List[int]]] = {}
        # Float32 as DDP sums; float64 models keep theirs; fp16 is widened.
        self.dtype = (torch.float64 if any(
            p.dtype == torch.float64 for p in self.params) else torch.float32)
        devices = sorted({str(p.device) for p in self.params})
        if len(devices) > 1:
            raise ValueError(f'AGVM needs the parameters on one device, '
                             f'got {devices}')

    @property
    def num_modules(self) -> int:
        """M, the number of modulated modules (``'others'`` excluded)."""
        return len(self.module_names)

    @property
    def device(self) -> torch.device:
        """The parameters' device, where every AGVM buffer lives."""
        return self.params[0].device

    def flatten(self, extra: int = 0,
                out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """Copy the gradients into one buffer on the parameters' device.

        Args:
            extra (int): Zeroed slots appended after the gradients. Defaults to
                0.
            out (Tensor, optional): A buffer of shape (numel + extra,) to fill
                (on CPU a fresh buffer this large costs more in page faults
                than the copy). Defaults to None.

        Returns:
            tuple[Tensor, Tensor]: The buffer, shape (numel + extra,), zeros
            where a grad is None, and a mask, shape (num_params,), 1 where the
            grad exists; both of dtype :attr:`dtype`.
        """
        grads = [
            p.new_zeros(p.numel()) if p.grad is None else p.grad.reshape(-1)
            for p in self.params
        ]
        if extra:
            grads.append(grads[0].new_zeros(extra))
        if out is None:
            out = torch.empty(self.numel + extra, dtype=self.dtype,
                              device=self.device)
        torch.cat(grads, out=out)
        used = torch.tensor([p.grad is not None for p in self.params],
                            dtype=self.dtype, device=self.device)
        return out, used

    def write_grads(self, flat: Tensor, used: Tensor) -> None:
        """Set each parameter's grad from ``flat`` (None where unused).

        Args:
            flat (Tensor): Shape (numel,), on the parameters' device.
            used (Tensor): Shape (num_params,); the grad is None where 0.
        """
        offset = 0
        for param, is_used in zip(self.params, used.tolist()):
            chunk = flat[offset:offset + param.numel()].view_as(param)
            offset += param.numel()
            if not is_used:
                param.grad = None
            elif param.grad is None:
                param.grad = chunk.to(param.dtype, copy=True)
            else:
                param.grad.copy_(chunk)

    def _module_runs(self, params: Sequence[Tensor]) -> List[List[int]]:
        """``[module, begin, end]`` of the runs of equal modulated modules
        in the concatenated gradients of ``params``."""
        runs: List[List[int]] = []
        offset = 0
        for param in params:
            module = self._module_of.get(id(param), self.num_modules)
            end = offset + param.numel()
            if runs and runs[-1][0] == module and runs[-1][2] == offset:
                runs[-1][2] = end
            elif module < self.num_modules:
                runs.append([module, offset, end])
            offset = end
        return runs

    def segment_sq_norms(self, params: Sequence[Tensor],
                         flat: Tensor) -> Tensor:
        """Per-module squared norms of the gradients of some parameters.

        Args:
            params (Sequence[Tensor]): Parameters in the order of ``flat``
                (e.g. one DDP bucket); those of no modulated module are
                skipped.
            flat (Tensor): Their gradients, shape (sum of numels,).

        Returns:
            Tensor: float64, shape (M,), on ``flat``'s device.
        """
        key = tuple(map(id, params))
        runs = self._runs.get(key)
        if runs is None:
            runs = self._runs[key] = self._module_runs(params)
        norms = torch.zeros(self.num_modules, dtype=torch.float64,
                            device=flat.device)
        if runs:
            index = torch.tensor([module for module, _, _ in runs],
                                 device=flat.device)
            norms.index_add_(0, index, torch.stack(
                [_sq_norm64(flat[lo:hi]) for _, lo, hi in runs]))
        return norms


def _sq_norm64(x: Tensor, chunk: int = 4096) -> Tensor:
    """Squared norm, chunks' norms squared and summed in float64.

    Within 1e-8 relative on 10^7 elements (one float32 sum: ~1e-5)."""
    main = x.numel() // chunk * chunk
    head = torch.linalg.vector_norm(
        x[:main].view(-1, chunk), dim=1,
        dtype=torch.promote_types(x.dtype, torch.float32))
    tail = x[main:].double()
    return head.double().square().sum() + tail.dot(tail)


# (params, their flat grads, out=None) -> the vector measured: a row of
# STATISTICS bound to the optimizer.
Preconditioner = Callable[..., Tensor]

# Row of |S_A + S_B|^2 in the norm table (rows 0 and 1: |S_A|^2, |S_B|^2).
_SUM = 2


def _statistics(norms: Tensor) -> HalfStatistics:
    """HalfStatistics from the (3, M) table |S_A|^2, |S_B|^2, |S_A+S_B|^2."""
    sq_a, sq_b, sq_sum = norms
    return HalfStatistics(dot=half_dot_from_norms(sq_sum, sq_a, sq_b),
                          sq_norm_a=sq_a, sq_norm_b=sq_b)


class DistributedHalves:
    """Halves of the ranks, measured on DDP re-estimation steps.

    Steps 1-2 (half sums, world sum; design.md, "Halves in DDP") run per
    bucket in DDP's communication hook, or once on the flattened gradient
    (:meth:`reduce_and_measure`); step 3 exchanges the (3, M) norm table.
    Builds the two half process groups, a collective: every rank must build
    this object in the same order.

    Args:
        layout (GradientLayout): The flat gradient layout.
        world_size (int): Number of ranks, >= 2.
        rank (int): This process' rank.
        precondition (Preconditioner): Applied before measuring
            (:data:`~mmext.agvm.statistics.STATISTICS`).
    """

    def __init__(self, layout: GradientLayout, world_size: int, rank: int,
                 precondition: Preconditioner):
        self.layout = layout
        self.world_size = world_size
        self.rank = rank
        self.precondition = precondition
        ranks_a, ranks_b = split_ranks(world_size)
        self.groups = [dist.new_group(ranks_a), dist.new_group(ranks_b)]
        halves = [ranks_a, ranks_b]
        self.half_size = len(ranks_a)
        self.side: Optional[int] = next(
            (i for i, ranks in enumerate(halves) if rank in ranks), None)
        self.is_leader = self.side is not None and rank == halves[
            self.side][0]
        # Measures |S_A + S_B|^2: the rank outside both halves if any (the
        # total holds its own gradient, only it can take it out), else 0.
        self.sum_rank = 2 * self.half_size if world_size % 2 else 0
        self._hooked: Dict[int, bool] = {}  # id(model) -> hook registered
        self._hook_step: Optional[int] = None  # step the hook measures
        self._fallback_step: Optional[int] = None  # step reduced by us
        self._measured_step: Optional[int] = None  # step with norms
        self._norms: List[Tuple[int, Tensor]] = []  # (row, norms (M,))

    @contextmanager
    def measuring(self, model: nn.Module, step: int) -> Iterator[None]:
        """Context of the forward pass of a micro-batch of ``step``.

        The hook measures a DDP ``model``; otherwise DDP's reduction is
        switched off (``no_sync``) and :meth:`measure` reduces.

        Args:
            model (nn.Module): The training model (DDP-wrapped or not).
            step (int): Optimizer step index of the micro-batch.

        Yields:
            None: Inside, the forward and backward of the micro-batch.
        """
        if self.attach(model):
            if self._hook_step != step:
                self._hook_step, self._norms = step, []
            yield
        elif hasattr(model, 'no_sync'):
            self._fallback_step = step
            with model.no_sync():
                yield
        else:
            yield

    def attach(self, model: nn.Module) -> bool:
        """Register the communication hook on a DDP model (once).

        Args:
            model (nn.Module): The training model.

        Returns:
            bool: Whether the hook measures this model; False for a model that
            is not DDP or already has a communication hook.
        """
        key = id(model)
        if key not in self._hooked:
            self._hooked[key] = False
            if isinstance(model, nn.parallel.DistributedDataParallel):
                try:
                    model.register_comm_hook(model.process_group,
                                             self._comm_hook)
                    self._hooked[key] = True
                except RuntimeError as error:
                    print_log(f'AGVM reduces the gradients after the '
                              f'backward: no DDP comm hook ({error})',
                              logger='current', level=logging.WARNING)
        return self._hooked[key]

    def measure(self, step: int) -> Optional[HalfStatistics]:
        """Statistics of the halves of ``step``, identical on every rank.

        The grads then hold the world-mean gradient, as after DDP.

        Args:
            step (int): Optimizer step index.

        Returns:
            HalfStatistics | None: None if the step's forward ran outside
            ``optim_context`` (DDP averaged the gradients already).
        """
        measured, fallback = self._measured_step, self._fallback_step
        self._hook_step = self._measured_step = self._fallback_step = None
        if measured == step:
            return self._exchange_norms()
        if fallback == step:
            return self.reduce_and_measure()
        return None

    def _comm_hook(self, state: Optional[dist.ProcessGroup],
                   bucket: dist.GradBucket
                   ) -> torch.futures.Future[torch.Tensor]:
        """DDP communication hook: DDP's default outside re-estimates."""
        if self._hook_step is None:
            return allreduce_hook(state, bucket)
        self._measured_step = self._hook_step
        grads, params = bucket.buffer(), bucket.parameters()
        own = self.share_half_sum(grads, params)
        future = dist.all_reduce(grads, group=state,
                                 async_op=True).get_future()

        def finish(future: torch.futures.Future) -> Tensor:
            total = future.value()[0]
            self.measure_sum(total, own, params)
            return total.div_(self.world_size)

        return future.then(finish)

    def reduce_and_measure(self) -> HalfStatistics:
        """Reduce and measure the flattened gradients (no DDP hook).

        The grads then hold the world-mean gradient.

        Returns:
            HalfStatistics: The statistics of the halves, identical on every
            rank.
        """
        layout = self.layout
        num_params = len(layout.params)
        buffer, used = layout.flatten(extra=num_params)
        grads = buffer[:layout.numel]
        self._norms = []
        own = self.share_half_sum(grads, layout.params)
        buffer[layout.numel:] = used
        dist.all_reduce(buffer)
        self.measure_sum(grads, own, layout.params)
        layout.write_grads(grads.div_(self.world_size),
                           buffer[layout.numel:])
        return self._exchange_norms()

    def share_half_sum(self, grads: Tensor,
                        params: Sequence[Tensor]) -> Optional[Tensor]:
        """Turn ``grads`` in place into this rank's share of ``S_A + S_B``.

        Args:
            grads (Tensor): This rank's gradients of ``params``, flat.
            params (Sequence[Tensor]): The parameters, in the order of
                ``grads``.

        Returns:
            Tensor | None: The odd world's extra rank's own gradient, else
            None.
        """
        if self.side is None:
            return grads.clone()
        if self.half_size > 1:
            dist.all_reduce(grads, group=self.groups[self.side])
        if self.is_leader:
            self._norms.append((self.side, self.layout.segment_sq_norms(
                params, self.precondition(params, grads))))
        else:
            grads.zero_()
        return None

    def measure_sum(self, total: Tensor, own: Optional[Tensor],
                     params: Sequence[Tensor]) -> None:
        """Record ``|P(S_A + S_B)|^2`` from the world sum, on
        :attr:`sum_rank` only.

        Args:
            total (Tensor): The world sum of the flat gradients, shape (N,).
            own (Tensor, optional): This rank's own flat gradient, shape
                (N,), subtracted when this rank is inside a half; None when
                it is outside both.
            params (Sequence[Tensor]): The parameters of the layout, in its
                order.
        """
        if self.rank != self.sum_rank:
            return
        halves_sum = total if own is None else total - own
        self._norms.append((_SUM, self.layout.segment_sq_norms(
            params, self.precondition(params, halves_sum))))

    def _exchange_norms(self) -> HalfStatistics:
        """All-reduce the (3, M) norm table."""
        norms = torch.zeros(3, self.layout.num_modules, dtype=torch.float64,
                            device=self.layout.device)
        # The per-bucket norms stay referenced until the next re-estimate:
        # on CUDA they may come from the hook's side streams.
        for row, values in self._norms:
            norms[row] += values
        dist.all_reduce(norms)
        return _statistics(norms)


class AccumulationHalves:
    """First vs second half of the accumulated micro-batches (one process).

    The first half's gradient sum and the total are copied into two buffers
    kept for the run (2 x numel of :attr:`GradientLayout.dtype`).

    Args:
        layout (GradientLayout): The flat gradient layout.
        accumulative_counts (int): K, even and >= 2.
        precondition (Preconditioner): Applied before measuring.
    """

    def __init__(self, layout: GradientLayout, accumulative_counts: int,
                 precondition: Preconditioner):
        self.layout = layout
        self.half = accumulative_counts // 2
        self.precondition = precondition
        self._buffers: Optional[Tensor] = None  # (2, numel): first, total
        self._first_of: Optional[int] = None  # step of the first half kept

    def after_backward(self, step: int, micro_batches_done: int) -> None:
        """Keep the gradient sum of the first half of step ``step``.

        Args:
            step (int): Optimizer step index.
            micro_batches_done (int): Backward passes done in this step.
        """
        if micro_batches_done != self.half:
            return
        if self._buffers is None:
            self._buffers = torch.empty(2, self.layout.numel,
                                        dtype=self.layout.dtype,
                                        device=self.layout.device)
        self.layout.flatten(out=self._buffers[0])
        self._first_of = step

    def measure(self, step: int) -> Optional[HalfStatistics]:
        """Statistics of the two halves of step ``step``.

        Args:
            step (int): Optimizer step index.

        Returns:
            HalfStatistics | None: None if the first half was not seen (e.g. a
            resume inside the accumulation window).
        """
        if self._first_of != step:
            return None
        self._first_of = None
        params = self.layout.params
        first, total = self._buffers
        self.precondition(params, first, out=first)
        self.precondition(params, self.layout.flatten(out=total)[0],
                          out=total)
        sq_a, sq_sum = (self.layout.segment_sq_norms(params, x)
                        for x in (first, total))
        # The preconditioner is linear: P(B) = P(A + B) - P(A), in place.
        sq_b = self.layout.segment_sq_norms(params, total.sub_(first))
        return _statistics(torch.stack([sq_a, sq_b, sq_sum]))
