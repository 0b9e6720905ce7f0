"""Collect the two halves' gradient statistics for AGVM.

Two sources of halves, both producing :class:`mmext.agvm.HalfStatistics`
from three per-module squared norms, |S_A|^2, |S_B|^2 and |S_A + S_B|^2
(the cross-half dot product follows from them,
:func:`mmext.agvm.half_dot_from_norms`):

* :class:`DistributedHalves` (world size >= 2): the first and second half of
  the ranks. With PyTorch DDP the measurement runs inside DDP's own
  bucketed, backward-overlapped reduction (a communication hook): each half
  sums its gradients, one rank per half takes the per-module norms of its
  half sum, and the world all-reduce that DDP does anyway produces the
  usual mean gradient. Without a DDP model (or if another communication
  hook is registered) the wrapper switches DDP's reduction off on those
  steps and the same reduction runs once on the whole flattened gradient.
  Only per-module scalars cross the halves beyond the gradient itself.
* :class:`AccumulationHalves` (single process, ``accumulative_counts`` even):
  the first vs the second half of the accumulated micro-batches.

Every buffer, mask and statistic lives on the parameters' device (NCCL
takes CUDA tensors only); gradients never make a host round trip.
"""
import logging
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from mmengine.logging import print_log
from torch import Tensor, nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import \
    allreduce_hook

from .layout import GradientLayout
from .statistics import HalfStatistics, half_dot_from_norms, split_ranks

__all__ = ['DistributedHalves', 'AccumulationHalves']

# Maps the gradients of ``params``, concatenated into one flat tensor, to the
# vector whose cosine AGVM measures (identity for SGD, the Adam
# preconditioning otherwise); must be linear and act element-wise.
Preconditioner = Callable[[Sequence[Tensor], Tensor], Tensor]

# Rows of the per-module norm table: |S_A|^2, |S_B|^2, |S_A + S_B|^2.
_HALF_A, _HALF_B, _SUM = 0, 1, 2


def _statistics(norms: Tensor) -> HalfStatistics:
    """HalfStatistics from the (3, M) table |S_A|^2, |S_B|^2, |S_A+S_B|^2."""
    sq_a, sq_b, sq_sum = norms
    return HalfStatistics(dot=half_dot_from_norms(sq_sum, sq_a, sq_b),
                          sq_norm_a=sq_a, sq_norm_b=sq_b)


class DistributedHalves:
    """Half-group reduction for AGVM re-estimation steps in DDP.

    Creates the two half process groups (``torch.distributed.new_group``, a
    collective: every rank must build this object in the same order).

    Per re-estimation step, with half sums S_A, S_B (an odd world's last
    rank is in neither half, its gradient g_x only enters the update):

    1. each rank of a half all-reduces inside its half (skipped for halves
       of one rank); the first rank of each half (its leader) takes
       |P(S_half)|^2 per module and keeps S_half, the other members zero
       their share, the extra rank keeps g_x;
    2. the world all-reduce of these shares gives S_A + S_B (+ g_x), whose
       mean is the usual DDP gradient; rank 0, or the extra rank that alone
       can subtract g_x, takes |P(S_A + S_B)|^2;
    3. one all-reduce of the (3, M) table of norms (each row filled by one
       rank) makes the statistics identical on every rank.

    With DDP, steps 1-2 run per gradient bucket in DDP's communication hook,
    overlapped with the backward pass, and replace DDP's own all-reduce; the
    extra work is the per-module norms and, for halves of several ranks,
    the half all-reduce. Otherwise they run once, after the backward, on
    the flattened gradient (:meth:`reduce_and_measure`).

    Args:
        layout (GradientLayout): The flat gradient layout.
        world_size (int): Number of ranks, >= 2.
        rank (int): This process' rank.
        precondition (Preconditioner): Applied before measuring.
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

        With a DDP ``model`` the communication hook (registered on the first
        call) measures during the synchronising backward; otherwise DDP's
        reduction is switched off (``no_sync``) and :meth:`measure` reduces.

        Args:
            model (nn.Module): The training model (DDP-wrapped or not).
            step (int): Optimizer step index of the micro-batch.
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

        Returns:
            bool: Whether the hook measures this model's re-estimation steps;
            False for a model that is not DDP, or whose DDP already has a
            communication hook (DDP takes one only; the fallback is used).
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
                    print_log(
                        f'AGVM: cannot register its DDP communication hook '
                        f'({error}); re-estimation steps reduce the '
                        f'flattened gradients after the backward instead.',
                        logger='current', level=logging.WARNING)
        return self._hooked[key]

    def is_hooked(self, model: nn.Module) -> bool:
        """Whether :meth:`attach` registered the hook on ``model``."""
        return self._hooked.get(id(model), False)

    def measure(self, step: int) -> Optional[HalfStatistics]:
        """Statistics of the halves of ``step``, identical on every rank.

        After this the parameters' grads hold the world-mean gradient (what
        DDP would have produced).

        Returns:
            HalfStatistics or None: None if neither the hook nor the
            fallback saw the halves of this step (its forward ran outside
            ``optim_context``, so DDP averaged the gradients already).
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
        """DDP communication hook: measure on re-estimation steps.

        Other steps get DDP's default (mean all-reduce of the bucket).
        """
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

        Writes the world-mean gradient into every ``param.grad`` (None where
        no rank has one, as DDP does) and returns the statistics.
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
        """Turn this rank's gradients into its share of S_A + S_B (+ g_x).

        In place on ``grads`` (steps 1 of the class doc).

        Returns:
            Tensor or None: The extra rank's own gradient, else None.
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
        """|P(S_A + S_B)|^2 from the world sum, on :attr:`sum_rank` only."""
        if self.rank != self.sum_rank:
            return
        halves_sum = total if own is None else total - own
        self._norms.append((_SUM, self.layout.segment_sq_norms(
            params, self.precondition(params, halves_sum))))

    def _exchange_norms(self) -> HalfStatistics:
        """All-reduce the norm table (step 3); one collective of 3M values."""
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

    The first half's gradient sum is kept, on the gradients' device, from
    the middle of a re-estimation step to its end.

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
        self._snapshot: Dict[int, Tensor] = {}

    def after_backward(self, step: int, micro_batches_done: int) -> None:
        """Keep the gradient sum of the first half of step ``step``.

        Args:
            step (int): Optimizer step index.
            micro_batches_done (int): Backward passes done in this step.
        """
        if micro_batches_done == self.half:
            self._snapshot = {step: self.layout.flatten()[0]}

    def measure(self, step: int) -> Optional[HalfStatistics]:
        """Statistics of the two halves of step ``step``.

        Returns:
            HalfStatistics or None: None if the first half was not seen
            (e.g. a run resumed in the middle of an accumulation window).
        """
        first = self._snapshot.pop(step, None)
        if first is None:
            return None
        layout, params = self.layout, self.layout.params
        total = layout.flatten()[0]
        sq_sum = layout.segment_sq_norms(params,
                                         self.precondition(params, total))
        sq_a = layout.segment_sq_norms(params,
                                       self.precondition(params, first))
        second = total.sub_(first)
        sq_b = layout.segment_sq_norms(params,
                                       self.precondition(params, second))
        return _statistics(torch.stack([sq_a, sq_b, sq_sum]))
