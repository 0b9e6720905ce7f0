"""``mmext.AGVMOptimWrapper`` and ``mmext.AGVMAmpOptimWrapper``: their
option table, start-of-run summary and checks, and the resume guard that
needs ``mmext.Runner``."""
import logging
import math
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import List, Optional, Sequence, Tuple, Union

import torch
from mmengine.dist import get_rank, get_world_size
from mmengine.hooks import EMAHook
from mmengine.logging import print_log
from mmengine.optim import AmpOptimWrapper, BaseOptimWrapper, OptimWrapper
from mmengine.registry import HOOKS
from mmengine.visualization import Visualizer
from torch import Tensor, nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.optim import Optimizer

from mmext.compat import (accumulative_counts, calling_runner,
                          drop_logged_scalar, grad_clipping_off, max_counts)
from mmext.log import logs_refusals, warn
from mmext.lr_scaling import check_auto_scale_lr, optim_wrappers, scaled_lrs
from mmext.nan_guard import NaNGuardHook
from mmext.options import is_int, is_number
from mmext.registry import OPTIM_WRAPPERS
from mmext.runner import register_resume_guard
from mmext.scheduler_checks import warmup_ends
from .exchange import AccumulationHalves, DistributedHalves, GradientLayout
from .schedule import AGVMSchedule
from .statistics import (DEFAULT_RATIO_RANGE, STATISTICS, HalfStatistics,
                         ModulationEMA, gradient_variance, modulation_factors,
                         split_ranks)

__all__ = [
    'SCALAR_FACTOR', 'SCALAR_VARIANCE', 'SCALAR_ESTIMATE', 'is_agvm_type',
    'halves_description', 'run_summary', 'AGVMOptimWrapper',
    'AGVMAmpOptimWrapper'
]

# Logged scalars ``<prefix>/<module name>``: the factor applied at every step
# (message hub, ``train/agvm_mu/...``); d_i and the factor after the update
# at each re-estimate (visualizer backends).
SCALAR_FACTOR = 'agvm_mu'
SCALAR_VARIANCE = 'agvm_d'
SCALAR_ESTIMATE = 'agvm_s'


# ------------------------------------------------------------------ options
def _is_pair(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2


# The wrapper's options (module_names is the constructor's), and mmengine's
# ``accumulative_counts``, which the halves need as an integer. A row:
# check(value, options) -> bool, what is expected (``{start_iter}`` filled
# in), a valid example.
_OPTIONS = {
    'statistic': (lambda v, _: v in STATISTICS, f'one of {list(STATISTICS)}',
                  'grad'),
    'accumulative_counts': (lambda v, _: is_int(v, 1), 'an integer >= 1',
                            2),
    'update_interval': (lambda v, _: is_int(v, 1), 'an integer >= 1', 10),
    'start_iter': (lambda v, _: is_int(v, 0), 'an integer >= 0', 560),
    'end_iter': (lambda v, o: v is None or is_int(v, o['start_iter'] + 1),
                 'None or an integer > start_iter ({start_iter})', None),
    'clip_grad_window': (
        lambda v, _: v is None or (_is_pair(v) and is_int(v[0], 0) and
                                   is_int(v[1], v[0] + 1)),
        'None or integers (begin, end), 0 <= begin < end', (360, 560)),
    'ratio_range': (
        lambda v, _: (_is_pair(v) and all(is_number(x) for x in v)
                      and 0 < v[0] <= v[1]),
        '(lo, hi) with 0 < lo <= hi', DEFAULT_RATIO_RANGE),
    'ema_momentum': (lambda v, _: is_number(v) and 0 <= v < 1,
                     'a number in [0, 1)', 0.97),
}


def _check_options(options: dict) -> None:
    """Raise ``ValueError`` at the first option its row of the table
    refuses, with the expected form."""
    for name, (check, expected, example) in _OPTIONS.items():
        value = options[name]
        if not check(value, options):
            raise ValueError(
                f'optim_wrapper.{name}={value!r}: expected '
                f'{expected.format(**options)}, e.g. {name}={example!r}')


# ------------------------------------------------------------------ summary
def _ranks(ranks: Sequence[int]) -> str:
    return (f'rank {ranks[0]}' if len(ranks) == 1 else
            f'ranks {ranks[0]}-{ranks[-1]}')


def halves_description(world_size: int, accumulative_counts: int) -> str:
    """How the halves A and B are formed.

    Args:
        world_size (int): Processes; the halves are ranks for 2 or more.
        accumulative_counts (int): K, micro-batches per optimizer step; the
            halves in one process.

    Returns:
        str: E.g. ``'ranks 0-3 vs ranks 4-7 (world size 8)'``.
    """
    if world_size >= 2:
        half_a, half_b = split_ranks(world_size)
        text = (f'{_ranks(half_a)} vs {_ranks(half_b)} (world size '
                f'{world_size}')
        if world_size % 2:
            text += (f'; rank {world_size - 1} is in neither half, its '
                     f'gradient only enters the update')
        return text + ')'
    half = accumulative_counts // 2
    first = ('micro-batch 1' if half == 1 else f'micro-batches 1-{half}')
    second = (f'micro-batch {half + 1}' if half == 1 else
              f'micro-batches {half + 1}-{accumulative_counts}')
    return (f'{first} vs {second} of the {accumulative_counts} accumulated '
            f'per optimizer step (one process)')


def run_summary(module_names: Sequence[str], sizes: Sequence[int],
                halves: str, schedule: AGVMSchedule, clipping: bool,
                statistic: str, max_iters: Optional[int] = None) -> str:
    """The block AGVM logs when training starts (lines starting with ``AGVM``).

    Args:
        module_names (Sequence[str]): The modulated modules, anchor first.
        sizes (Sequence[int]): Trainable parameters per module, then
            ``'others'``'s.
        halves (str): :func:`halves_description`.
        schedule (AGVMSchedule): When AGVM re-estimates and applies.
        clipping (bool): Whether ``clip_grad`` is set.
        statistic (str): The statistic, a key of
            :data:`~mmext.agvm.statistics.STATISTICS`.
        max_iters (int, optional): The run's iterations. Defaults to None.

    Returns:
        str: The lines, joined by newlines.
    """
    width = max(len(n) for n in list(module_names) + ['others'])
    lines = [f'AGVM: {len(module_names)} modulated modules, anchor (module '
             f'0) {module_names[0]!r}:']
    for name, size in zip(module_names, sizes):
        lines.append(f'AGVM:   {name:<{width}} {size:>12,d} parameters')
    if sizes[len(module_names)]:
        lines.append(f"AGVM:   {'others':<{width}} "
                     f'{sizes[len(module_names)]:>12,d} parameters '
                     f'(outside module_names: factor 1)')
    lines.append(f'AGVM: halves: {halves}')
    end = ('the end of training' if schedule.end_iter == math.inf else
           f'iteration {schedule.end_iter}')
    if max_iters is not None and schedule.end_iter != math.inf:
        end = f'{end} of {max_iters}'
    lines.append(
        f'AGVM: active from iteration {schedule.start_iter} to {end} '
        f'(runner iterations); re-estimates every {schedule.update_interval}'
        f' optimizer step(s) of {schedule.accumulative_counts} iteration(s) '
        f"from the first active one; statistic '{statistic}'")
    if not clipping:
        clip = 'off (no clip_grad)'
    elif schedule.clip_grad_window is None:
        clip = 'at every step'
    else:
        begin, stop = schedule.clip_grad_window
        clip = f'in iterations [{begin}, {stop}] only (clip_grad_window)'
    lines.append(f'AGVM: gradient clipping {clip}')
    return '\n'.join(lines)


# ------------------------------------------------------- checks at the start
def is_agvm_type(wrapper_type) -> bool:
    """Whether an ``optim_wrapper`` config's ``type`` is an AGVM wrapper.

    Args:
        wrapper_type (str | type): The ``type``, a registered name or a class.

    Returns:
        bool: True for :class:`AGVMOptimWrapper` and its subclasses.
    """
    if isinstance(wrapper_type, str):
        wrapper_type = OPTIM_WRAPPERS.get(wrapper_type)
    return isinstance(wrapper_type, type) and issubclass(
        wrapper_type, AGVMOptimWrapper)


def ema_interval_messages(hook_cfgs: Sequence[dict],
                          accumulative_counts: int) -> List[str]:
    """The ``EMAHook`` intervals that average the same weights several times.

    The weights change every K runner iterations with accumulation, so an
    ``interval`` that is no multiple of K averages them again.

    Args:
        hook_cfgs (Sequence[dict]): ``custom_hooks`` and the values of
            ``default_hooks``.
        accumulative_counts (int): K.

    Returns:
        list[str]: A message per such hook, naming the interval to set.
    """
    messages = []
    for hook in hook_cfgs:
        hook_type = hook.get('type') if isinstance(hook, dict) else None
        if isinstance(hook_type, str):
            hook_type = HOOKS.get(hook_type)
        if not (isinstance(hook_type, type)
                and issubclass(hook_type, EMAHook)):
            continue
        interval = hook.get('interval', 1)
        if accumulative_counts > 1 and interval % accumulative_counts:
            messages.append(
                f'{hook_type.__name__} interval={interval} averages the same '
                f'weights (accumulative_counts={accumulative_counts}): set '
                f'interval={accumulative_counts}')
    return messages


# ------------------------------------------------------------ the wrapper
@OPTIM_WRAPPERS.register_module()
class AGVMOptimWrapper(OptimWrapper):
    """Optimizer wrapper with AGVM per-module learning-rate modulation.

    Xue et al., NeurIPS 2022 (arXiv 2210.11078), Sec. 3; reference
    Sense-X/AGVM ``agvm/optim/agvm_optimizer_hook.py``. Each step in the
    window multiplies the LR of module i's param groups by s_i
    (:mod:`mmext.agvm.statistics`) around ``optimizer.step()``. Halves: the
    ranks, or in one process the accumulated micro-batches. Build it with
    :class:`mmext.agvm.AGVMOptimWrapperConstructor`, which checks
    ``module_names`` and tags the param groups by module.

    Args:
        optimizer (Optimizer): Optimizer with param groups tagged by module.
        module_names (Sequence[str], optional): Modulated modules, anchor
            first. Filled in by the constructor. Defaults to None.
        update_interval (int): tau, optimizer steps between re-estimates.
            Defaults to 10.
        ema_momentum (float): alpha of the EMA, in [0, 1). Defaults to 0.97.
        ratio_range (tuple[float, float]): Clamp of d_anchor / d_i,
            ``0 < lo <= hi``. Defaults to (0.5, 10.0).
        start_iter (int): First runner iteration with AGVM. Defaults to 0.
        end_iter (int, optional): First iteration without AGVM again; None
            for the end of training. Defaults to None.
        statistic (str): A key of :data:`mmext.agvm.statistics.STATISTICS`:
            ``'grad'`` (raw gradient) or ``'adam'`` (g / (sqrt(v) + eps),
            AdamW mode, needs an optimizer keeping ``exp_avg_sq``). Defaults to
            ``'grad'``.
        clip_grad_window (tuple[int, int], optional): Runner iterations
            ``[begin, end]`` (both included) in which ``clip_grad`` applies;
            None for all. Defaults to None.
        accumulative_counts (int): Micro-batches per optimizer step, as in
            ``OptimWrapper``; in one process even and >= 2 (the halves).
            Defaults to 1.
        clip_grad (dict, optional): As in ``OptimWrapper``. Defaults to None.
        **kwargs: Options of the next wrapper in the MRO (``AmpOptimWrapper``
            for :class:`AGVMAmpOptimWrapper`); built from a config, an
            unknown name raises ``TypeError`` naming the option meant
            (:mod:`mmext.registry`).

    Raises:
        ValueError: On an invalid option, untagged param groups, a
            statistic the optimizer cannot give (``'adam'`` with SGD or
            ZeRO, whose state is sharded), or one process with an odd or
            < 2 ``accumulative_counts``.

    Examples:
        >>> # In an mmdet / mmseg recipe's config, AGVM after the warm-up
        >>> optim_wrapper = dict(
        ...     type='mmext.AGVMOptimWrapper',
        ...     constructor='mmext.AGVMOptimWrapperConstructor',
        ...     optimizer=dict(type='SGD', lr=0.02, momentum=0.9),
        ...     start_iter=600)
        >>> # In one process the halves are two accumulated micro-batches
        >>> optim_wrapper = dict(optim_wrapper, accumulative_counts=2)
    """

    @logs_refusals
    def __init__(self,
                 optimizer: Optimizer,
                 module_names: Optional[Sequence[str]] = None,
                 update_interval: int = 10,
                 ema_momentum: float = 0.97,
                 ratio_range: Tuple[float, float] = DEFAULT_RATIO_RANGE,
                 start_iter: int = 0,
                 end_iter: Optional[int] = None,
                 statistic: str = 'grad',
                 clip_grad_window: Optional[Tuple[int, int]] = None,
                 accumulative_counts: int = 1,
                 clip_grad: Optional[dict] = None,
                 **kwargs):
        _check_options(dict(
            statistic=statistic, accumulative_counts=accumulative_counts,
            update_interval=update_interval, start_iter=start_iter,
            end_iter=end_iter, clip_grad_window=clip_grad_window,
            ratio_range=ratio_range, ema_momentum=ema_momentum))
        super().__init__(optimizer=optimizer,
                         accumulative_counts=accumulative_counts,
                         clip_grad=clip_grad, **kwargs)
        if not module_names or any('agvm_module' not in group
                                   for group in optimizer.param_groups):
            raise ValueError('untagged param groups: set constructor='
                             "'mmext.AGVMOptimWrapperConstructor'")
        row = STATISTICS[statistic]
        if row.accepts and isinstance(optimizer, ZeroRedundancyOptimizer):
            raise ValueError(f'statistic={statistic!r} reads the optimizer '
                             "state ZeRO shards: use statistic='grad'")
        if row.accepts and not row.accepts(optimizer):
            raise ValueError(f'statistic={statistic!r} needs '
                             f'{row.optimizer_kind}, got '
                             f'{type(optimizer).__name__}')
        if clip_grad_window is not None and not clip_grad:
            raise ValueError(f'clip_grad_window={tuple(clip_grad_window)} '
                             'needs clip_grad, e.g. dict(max_norm=1.0)')
        self.ratio_range = tuple(ratio_range)
        self.schedule = AGVMSchedule(update_interval, start_iter, end_iter,
                                     accumulative_counts, clip_grad_window)
        self.statistic = statistic
        self._clipping = bool(clip_grad)
        self.layout = GradientLayout(optimizer, module_names)
        self.module_names = self.layout.module_names
        self.ema = ModulationEMA(len(self.module_names), ema_momentum)
        self.last_variance = torch.full((len(self.module_names), ),
                                        float('nan'), dtype=torch.float64)
        # The statistic's preconditioner, bound to the optimizer's state.
        self.precondition = partial(row.precondition, optimizer)
        if get_world_size() >= 2:
            self.halves = DistributedHalves(self.layout, get_world_size(),
                                            get_rank(), self.precondition)
        elif accumulative_counts < 2 or accumulative_counts % 2:
            raise ValueError('one process needs an even accumulative_counts '
                             f'>= 2, got {accumulative_counts}')
        else:
            self.halves = AccumulationHalves(
                self.layout, accumulative_counts, self.precondition)
        self._warned_no_takeover = False
        # Whether a NaNGuardHook checks this run's gradients (seen when
        # training starts).
        self._nan_guard = False

    @logs_refusals
    def initialize_count_status(self, model: nn.Module, init_counts: int,
                                max_counts: int) -> None:
        """mmengine's set-up of the counters, then the checks against the run.

        Any runner's ``train`` calls it once the loop, schedulers and resumed
        state exist. Logs :meth:`summary`; warns about what the run cannot
        honour, a ``start_iter`` in a warm-up and an EMAHook's interval;
        refuses ``auto_scale_lr`` with accumulation. The checks read the
        runner's config object (:func:`mmext.compat.calling_runner`); without
        one they are skipped with a warning. Notes whether a ``NaNGuardHook``
        of the runner checks the gradients.

        Args:
            model (nn.Module): The training model.
            init_counts (int): ``runner.iter``.
            max_counts (int): ``runner.max_iters``.

        Raises:
            ValueError: For ``auto_scale_lr`` with accumulation
                (:func:`~mmext.lr_scaling.check_auto_scale_lr`).
        """
        super().initialize_count_status(model, init_counts, max_counts)
        print_log(self.summary(max_counts), logger='current',
                  level=logging.INFO)
        for message in self.schedule.unused_values(max_counts):
            warn(message)
        runner = calling_runner()
        self._nan_guard = any(
            isinstance(hook, NaNGuardHook) and hook.check_grads
            for hook in getattr(runner, 'hooks', []))
        cfg = getattr(runner, 'cfg', None)
        if not cfg:
            warn('AGVM start checks skipped (warm-up, EMAHook, '
                 'auto_scale_lr): no runner config')
            return
        check_auto_scale_lr(cfg.get('auto_scale_lr'), self, self.message_hub)
        max_epochs = (cfg.get('train_cfg') or {}).get('max_epochs')
        epoch_length = max_counts // max_epochs if max_epochs else 1
        messages = self.schedule.inside_warmup(
            warmup_ends(cfg.get('param_scheduler'), epoch_length))
        hooks = list(cfg.get('custom_hooks') or []) + list(
            (cfg.get('default_hooks') or {}).values())
        messages += ema_interval_messages(hooks, self._counts[1])
        for message in messages:
            warn(message)

    def summary(self, max_iters: Optional[int] = None) -> str:
        """What AGVM will do in this run.

        Args:
            max_iters (int, optional): The run's iterations. Defaults to None.

        Returns:
            str: :func:`run_summary` of this wrapper.
        """
        world_size = self.halves.world_size if self.distributed else 1
        return run_summary(
            self.module_names, [hi - lo for lo, hi in self.layout.bounds],
            halves_description(world_size, self._counts[1]), self.schedule,
            self._clipping, self.statistic, max_iters)

    @property
    def distributed(self) -> bool:
        """Whether the halves are halves of the ranks."""
        return isinstance(self.halves, DistributedHalves)

    @property
    def _counts(self) -> Tuple[int, int, int]:
        """mmengine's ``(inner_count, accumulative_counts, max_counts)``."""
        return (self.inner_count, accumulative_counts(self),
                max_counts(self))

    def _measures(self, iteration: int) -> bool:
        """Whether the step of ``iteration`` re-estimates the factors."""
        return self.schedule.is_measurement(iteration, self._counts[2])

    @contextmanager
    def optim_context(self, model: nn.Module):
        """mmengine's context, with the halves' on DDP re-estimation steps.

        Args:
            model (nn.Module): The training model (DDP-wrapped or not).

        Yields:
            None: Inside, the forward and backward of a micro-batch
            (:meth:`DistributedHalves.measuring` on re-estimation steps).
        """
        with ExitStack() as stack:
            iteration = self._counts[0]
            if self.distributed:
                # DDP takes its communication hook before the first backward.
                self.halves.attach(model)
            if self.distributed and self._measures(iteration):
                stack.enter_context(self.halves.measuring(
                    model, self.schedule.step_index(iteration)))
            stack.enter_context(super().optim_context(model))
            yield

    def backward(self, loss: Tensor, **kwargs) -> None:
        """Back-propagate; in one process, keep the first half's grads.

        Args:
            loss (Tensor): The loss, a scalar.
            **kwargs: Keyword arguments of ``loss.backward``.
        """
        iteration = self._counts[0]
        super().backward(loss, **kwargs)
        if not self.distributed and self._measures(iteration):
            self.halves.after_backward(
                self.schedule.step_index(iteration),
                iteration + 1 - self.schedule.window_start(iteration))

    def step(self, **kwargs) -> None:
        """Re-estimate if due, then step with the factors applied.

        Each module's param groups have their LR multiplied by its factor
        around ``optimizer.step()``; the factors are logged as
        ``train/agvm_mu/<module>`` (:data:`SCALAR_FACTOR`).

        Args:
            **kwargs: Keyword arguments of ``optimizer.step``.
        """
        iteration = self._counts[0] - 1
        if self._measures(iteration):
            self.update_factors(self.schedule.step_index(iteration))
        active = self.schedule.is_active(iteration)
        applied = self.ema.factors.tolist() if active else [1.0] * len(
            self.module_names)
        for name, factor in zip(self.module_names, applied):
            self.message_hub.update_scalar(f'train/{SCALAR_FACTOR}/{name}',
                                           factor)
        # 'others' (index M) keeps factor 1.
        group_factors = applied + [1.0]
        with ExitStack() as stack:
            stack.enter_context(
                scaled_lrs(self.optimizer.param_groups, [
                    group_factors[module]
                    for module in self.layout.group_modules
                ]))
            if not self.schedule.clips(iteration):
                stack.enter_context(self._without_clipping())
            super().step(**kwargs)

    @contextmanager
    def _without_clipping(self):
        """Skip mmengine's clipping for one step; drop its stale grad_norm."""
        with grad_clipping_off(self) as was_clipping:
            if was_clipping:
                drop_logged_scalar(self.message_hub,
                                   f'train/{self.grad_name}')
            yield

    def update_factors(self, step: int) -> None:
        """Measure the halves of an optimizer step and update the EMA.

        Logs d_i and the factors at the step (:data:`SCALAR_VARIANCE`,
        :data:`SCALAR_ESTIMATE`); at non-finite gradients the factors stay.

        Args:
            step (int): Optimizer step index.

        Raises:
            FloatingPointError: At non-finite gradients, naming the modules,
                unless the loss scaler or a ``NaNGuardHook`` handles the step.
        """
        stats = self.halves.measure(step)
        if stats is None:
            # DDP already averaged the grads (no optim_context around the
            # forward): both halves would look identical.
            if self.distributed and not self._warned_no_takeover:
                print_log(
                    'AGVM skipped a re-estimate: its forward ran outside '
                    'optim_wrapper.optim_context(model)', logger='current',
                    level=logging.WARNING)
                self._warned_no_takeover = True
            return
        # The one device-to-host transfer of a re-estimate: 3M float64.
        table = torch.stack(tuple(stats)).cpu()
        finite = torch.isfinite(table).all(0)
        if not finite.all():
            self._non_finite(step, [
                name for name, ok in zip(self.module_names, finite.tolist())
                if not ok
            ])
            return
        stats = HalfStatistics(*table)
        d, valid = gradient_variance(stats)
        mu = modulation_factors(d, valid, 0, self.ratio_range)
        self.ema.update(mu)
        self.last_variance = torch.where(valid, d, self.last_variance)
        self._log_estimate(step, d, valid)

    def _non_finite(self, step: int, modules: List[str]) -> None:
        """Stop at non-finite gradients of ``modules`` in step ``step``, or
        leave the step to whatever handles it; the factors never move.

        As ``mmext.NaNGuardHook`` (its default stops): AGVM stops, unless
        the loss scaler (AMP: it skips such steps) or a ``NaNGuardHook``
        checking gradients (it stops or skips, with the why) acts on this
        step, just after; then AGVM skips the re-estimate, saying so.
        Raises ``FloatingPointError`` naming the modules, before the step."""
        where = f'{modules} at iteration {(step + 1) * self._counts[1]}'
        if isinstance(self, AmpOptimWrapper) or self._nan_guard:
            handler = ('the loss scaler' if isinstance(self, AmpOptimWrapper)
                       else 'NaNGuardHook')
            print_log(f'AGVM skipped the re-estimate: non-finite gradients '
                      f'of {where} ({handler} handles the step)',
                      logger='current', level=logging.WARNING)
            return
        raise FloatingPointError(f'non-finite gradients of {where}: add '
                                 'mmext.NaNGuardHook to find why')

    def _log_estimate(self, step: int, d: Tensor, valid: Tensor) -> None:
        """Write d_i and s_i to the visualizer, at the re-estimate's step."""
        scalars = {
            f'{SCALAR_VARIANCE}/{name}': value
            for name, value, ok in zip(self.module_names, d.tolist(),
                                       valid.tolist()) if ok
        }
        scalars.update({
            f'{SCALAR_ESTIMATE}/{name}': factor
            for name, factor in zip(self.module_names,
                                    self.ema.factors.tolist())
        })
        try:
            visualizer = Visualizer.get_current_instance()
        except RuntimeError:  # no runner built a visualizer: nowhere to log
            return
        visualizer.add_scalars(scalars, step=(step + 1) * self._counts[1])

    def state_dict(self) -> dict:
        """The optimizer's state dict plus AGVM's.

        Returns:
            dict: mmengine's state dict and ``'agvm'``: module names, EMA state
            and the last d_i (float64, shape (M,)).
        """
        state = super().state_dict()
        state['agvm'] = dict(
            module_names=list(self.module_names),
            ema=self.ema.state_dict(),
            last_variance=self.last_variance.clone())
        return state

    @logs_refusals
    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict` output.

        Args:
            state_dict (dict): A state dict of an AGVM wrapper.

        Raises:
            ValueError: For a checkpoint without AGVM state, or of other module
                names or param groups (naming ``load_from`` to start afresh).
        """
        state_dict = dict(state_dict)
        agvm = state_dict.pop('agvm', None)
        if agvm is None:
            raise ValueError('the checkpoint has no AGVM state: use '
                             'load_from=CKPT (no --resume)')
        saved_names = list(agvm['module_names'])
        if saved_names != self.module_names:
            raise ValueError(f'the checkpoint has module_names={saved_names}:'
                             ' set those, or use load_from=CKPT (no --resume)')
        saved = _group_sizes(state_dict['param_groups'])
        current = _group_sizes(self.optimizer.param_groups)
        if saved != current:
            raise ValueError(f'param groups (module, size) {saved} in the '
                             f'checkpoint, {current} now: use load_from=CKPT'
                             ' (no --resume)')
        self.ema.load_state_dict(agvm['ema'])
        self.last_variance = torch.as_tensor(
            agvm['last_variance'], dtype=torch.float64, device='cpu').clone()
        super().load_state_dict(state_dict)


def _group_sizes(param_groups: List[dict]) -> list:
    """(module, number of parameters) of each param group."""
    return [(g.get('agvm_module'), len(g['params'])) for g in param_groups]


@OPTIM_WRAPPERS.register_module()
class AGVMAmpOptimWrapper(AGVMOptimWrapper, AmpOptimWrapper):
    """:class:`AGVMOptimWrapper` with mmengine's CUDA mixed precision.

    The halves are measured on the scaled gradients (the cosine does not
    depend on the loss scale).

    Args:
        optimizer (Optimizer): As in :class:`AGVMOptimWrapper`.
        module_names (Sequence[str], optional): As in
            :class:`AGVMOptimWrapper`. Defaults to None.
        update_interval (int): As in :class:`AGVMOptimWrapper`. Defaults to
            10.
        ema_momentum (float): As in :class:`AGVMOptimWrapper`. Defaults to
            0.97.
        ratio_range (tuple[float, float]): As in :class:`AGVMOptimWrapper`.
            Defaults to (0.5, 10.0).
        start_iter (int): As in :class:`AGVMOptimWrapper`. Defaults to 0.
        end_iter (int, optional): As in :class:`AGVMOptimWrapper`. Defaults
            to None.
        statistic (str): As in :class:`AGVMOptimWrapper`. Defaults to
            ``'grad'``.
        clip_grad_window (tuple[int, int], optional): As in
            :class:`AGVMOptimWrapper`. Defaults to None.
        accumulative_counts (int): As in :class:`AGVMOptimWrapper`. Defaults
            to 1.
        clip_grad (dict, optional): As in :class:`AGVMOptimWrapper`.
            Defaults to None.
        loss_scale (str | float | dict): As in ``AmpOptimWrapper``.
            Defaults to ``'dynamic'``.
        dtype (str | torch.dtype, optional): As in ``AmpOptimWrapper``.
            Defaults to None.
        use_fsdp (bool): As in ``AmpOptimWrapper``. Defaults to False.

    Raises:
        AssertionError: Without CUDA (raised by ``AmpOptimWrapper``).

    Examples:
        >>> # What tools/train.py --amp selects for AGVMOptimWrapper
        >>> optim_wrapper = dict(
        ...     type='mmext.AGVMAmpOptimWrapper', loss_scale='dynamic',
        ...     constructor='mmext.AGVMOptimWrapperConstructor',
        ...     optimizer=dict(type='SGD', lr=0.02, momentum=0.9))
    """

    def __init__(self,
                 optimizer: Optimizer,
                 module_names: Optional[Sequence[str]] = None,
                 update_interval: int = 10,
                 ema_momentum: float = 0.97,
                 ratio_range: Tuple[float, float] = DEFAULT_RATIO_RANGE,
                 start_iter: int = 0,
                 end_iter: Optional[int] = None,
                 statistic: str = 'grad',
                 clip_grad_window: Optional[Tuple[int, int]] = None,
                 accumulative_counts: int = 1,
                 clip_grad: Optional[dict] = None,
                 loss_scale: Union[str, float, dict] = 'dynamic',
                 dtype: Union[str, torch.dtype, None] = None,
                 use_fsdp: bool = False):
        super().__init__(
            optimizer, module_names, update_interval, ema_momentum,
            ratio_range, start_iter, end_iter, statistic, clip_grad_window,
            accumulative_counts, clip_grad, loss_scale=loss_scale,
            dtype=dtype, use_fsdp=use_fsdp)


# ------------------------------------------------- needs mmext.Runner
@register_resume_guard
def agvm_checkpoint_needs_the_wrapper(runner, checkpoint: dict,
                                       filename: str,
                                       resume_optimizer: bool) -> None:
    """Refuse to resume AGVM optimizer state into a wrapper without AGVM.

    A resume guard of :class:`mmext.Runner`
    (:func:`~mmext.runner.register_resume_guard`).

    Args:
        runner (Runner): The runner resuming.
        checkpoint (dict): The loaded checkpoint.
        filename (str): Its path.
        resume_optimizer (bool): Whether the optimizer state is resumed.

    Raises:
        ValueError: Naming the AGVM wrapper to use, or ``load_from``.
    """
    saved = (checkpoint.get('optimizer') or {}) if resume_optimizer else {}
    if 'param_groups' in saved:
        saved = {'': saved}
    for name, wrapper in optim_wrappers(runner.optim_wrapper).items():
        agvm = (saved.get(name) or {}).get('agvm')
        if (agvm is not None and isinstance(wrapper, BaseOptimWrapper)
                and not isinstance(wrapper, AGVMOptimWrapper)):
            raise ValueError(f'{filename} has AGVM state: set type='
                             "'mmext.AGVMOptimWrapper', or use load_from")
