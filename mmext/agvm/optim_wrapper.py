"""``mmext.AGVMOptimWrapper`` and ``mmext.AGVMAmpOptimWrapper``.

The wrapper with its options (one table, checked once when the wrapper is
built), its start-of-run summary, the checks against the run it makes when
training starts (with any runner: it reads the run's config from the message
hub) and the one resume guard that needs ``mmext.Runner``.
"""
import inspect
import logging
import math
import numbers
from contextlib import ExitStack, contextmanager
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import torch
from mmengine.dist import get_rank, get_world_size
from mmengine.hooks import EMAHook
from mmengine.logging import print_log
from mmengine.optim import AmpOptimWrapper, BaseOptimWrapper, OptimWrapper
from mmengine.registry import HOOKS
from mmengine.visualization import Visualizer
from torch import Tensor, nn
from torch.optim import Optimizer

from mmext.compat import (accumulative_counts, drop_logged_scalar,
                          grad_clipping_off, max_counts, run_config)
from mmext.log import warn
from mmext.lr_scaling import check_auto_scale_lr, optim_wrappers, scaled_lrs
from mmext.registry import OPTIM_WRAPPERS
from mmext.runner import register_resume_guard, restart_hint
from mmext.scheduler_checks import warmup_ends
from .exchange import (AccumulationHalves, DistributedHalves, GradientLayout,
                       adam_precondition)
from .schedule import AGVMSchedule
from .statistics import (DEFAULT_RATIO_RANGE, HalfStatistics, ModulationEMA,
                         gradient_variance, modulation_factors, split_ranks)

__all__ = [
    'SCALAR_FACTOR', 'SCALAR_VARIANCE', 'SCALAR_ESTIMATE', 'STATISTICS',
    'check_option', 'halves_description', 'run_summary', 'AGVMOptimWrapper',
    'AGVMAmpOptimWrapper'
]

# Logged scalars, one per module (``<prefix>/<module name>``): the factor
# applied at every optimizer step (through the message hub, so at the
# logger's interval as ``train/agvm_mu/...``), and, at each re-estimate,
# d_i and the factor after the update (straight to the visualizer backends).
SCALAR_FACTOR = 'agvm_mu'
SCALAR_VARIANCE = 'agvm_d'
SCALAR_ESTIMATE = 'agvm_s'

# What the cosine is taken on: the raw gradient (SGD) or the
# Adam-preconditioned one (AdamW mode).
STATISTICS = ('grad', 'adam')


# ------------------------------------------------------------------ options
def _is_int(value, minimum: int) -> bool:
    """An integer (not a bool, str or float) >= ``minimum``."""
    return (isinstance(value, numbers.Integral)
            and not isinstance(value, bool) and value >= minimum)


def _is_number(value) -> bool:
    """A real number that is not a bool (``True`` is an int in Python)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_pair(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2


class _Option(NamedTuple):
    """One row of the option table.

    Attributes:
        check (callable): ``check(value, options) -> bool``; ``options``
            holds every option (defaults filled in), for ``end_iter``.
        expected (str): What is expected; ``{start_iter}`` is filled in.
        example: A valid value, written as the config value.
    """
    check: Callable[[object, dict], bool]
    expected: str
    example: object


# Every AGVM option of the wrapper (mmengine's ``accumulative_counts`` too:
# the schedule counts with it), checked in this order.
_OPTIONS = {
    'module_names': _Option(
        lambda v, _: v is None or (isinstance(v, (list, tuple)) and all(
            isinstance(n, str) for n in v)),
        "None (the model's top-level modules) or a list of submodule names, "
        'anchor first', ['backbone', 'neck', 'rpn_head', 'roi_head']),
    'statistic': _Option(lambda v, _: v in STATISTICS,
                         f'one of {list(STATISTICS)}', 'grad'),
    'accumulative_counts': _Option(lambda v, _: _is_int(v, 1),
                                   'an integer >= 1', 2),
    'update_interval': _Option(lambda v, _: _is_int(v, 1), 'an integer >= 1',
                               10),
    'start_iter': _Option(lambda v, _: _is_int(v, 0), 'an integer >= 0', 560),
    'end_iter': _Option(
        lambda v, o: v is None or _is_int(v, o['start_iter'] + 1),
        'None (to the end of training) or an integer > start_iter '
        '({start_iter})', None),
    'clip_grad_window': _Option(
        lambda v, _: v is None or (_is_pair(v) and _is_int(v[0], 0) and
                                   _is_int(v[1], v[0] + 1)),
        '(begin, end): runner iterations, integers with 0 <= begin < end, or '
        'None (clip always)', (360, 560)),
    'ratio_range': _Option(
        lambda v, _: (_is_pair(v) and all(_is_number(x) for x in v)
                      and 0 < v[0] <= v[1]),
        '(lo, hi) with 0 < lo <= hi', DEFAULT_RATIO_RANGE),
    'ema_momentum': _Option(lambda v, _: _is_number(v) and 0 <= v < 1,
                            'a number in [0, 1)', 0.97),
}


def check_option(name: str, value, options: Optional[dict] = None) -> None:
    """Check one AGVM option against the table.

    Args:
        name (str): A key of the option table.
        value: The value given.
        options (dict, optional): Every option, for the checks that depend
            on another (``end_iter`` on ``start_iter``).

    Raises:
        ValueError: e.g. ``optim_wrapper.ratio_range=10 (int): expected (lo,
            hi) with 0 < lo <= hi, e.g. ratio_range=(0.5, 10.0)``.
    """
    option = _OPTIONS[name]
    options = options or {}
    if not option.check(value, options):
        raise ValueError(
            f'optim_wrapper.{name}={value!r} ({type(value).__name__}): '
            f'expected {option.expected.format(**options)}, e.g. '
            f'{name}={option.example!r}')


def _check_options(cls: type, options: dict) -> None:
    """Refuse unknown option names (listing the valid ones), then check
    every option of the table.

    Args:
        cls (type): The wrapper class; the ``__init__`` arguments of it and
            of its OptimWrapper bases are the valid names.
        options (dict): The options given, defaults filled in.
    """
    known = set()
    for klass in cls.__mro__:
        if issubclass(klass, OptimWrapper) and '__init__' in vars(klass):
            known |= set(inspect.signature(klass.__init__).parameters)
    unknown = sorted(set(options) - known)
    if unknown:
        valid = sorted(known - {'self', 'kwargs', 'optimizer'})
        raise ValueError(f'{cls.__name__} got unknown options {unknown}; '
                         f'its options are {valid}')
    for name in _OPTIONS:
        check_option(name, options[name], options)


# ------------------------------------------------------------------ summary
def _ranks(ranks: Sequence[int]) -> str:
    return (f'rank {ranks[0]}' if len(ranks) == 1 else
            f'ranks {ranks[0]}-{ranks[-1]}')


def halves_description(world_size: int, accumulative_counts: int) -> str:
    """How the halves A and B are formed.

    Args:
        world_size (int): Processes.
        accumulative_counts (int): K, micro-batches per optimizer step.

    Returns:
        str: e.g. ``'ranks 0-3 vs ranks 4-7 (world size 8)'`` or
        ``'micro-batch 1 vs micro-batch 2 of the 2 accumulated per optimizer
        step (one process)'``.
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
    """The block AGVM logs when training starts.

    Args:
        module_names (Sequence[str]): Modulated modules, anchor first.
        sizes (Sequence[int]): Trainable parameters per module, then
            ``'others'`` (one more entry).
        halves (str): From :func:`halves_description`.
        schedule (AGVMSchedule): The window, interval and clipping window.
        clipping (bool): Whether ``clip_grad`` is set.
        statistic (str): ``'grad'`` or ``'adam'``.
        max_iters (int, optional): Iterations of the run.

    Returns:
        str: Several lines, each starting with ``AGVM``.
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
        clip = f'in iterations [{begin}, {stop}) only (clip_grad_window)'
    lines.append(f'AGVM: gradient clipping {clip}')
    return '\n'.join(lines)


# ------------------------------------------------------- checks at the start
def _is_agvm(wrapper_type) -> bool:
    """Whether an ``optim_wrapper`` config's ``type`` is an AGVM wrapper."""
    if isinstance(wrapper_type, str):
        wrapper_type = OPTIM_WRAPPERS.get(wrapper_type)
    return isinstance(wrapper_type, type) and issubclass(
        wrapper_type, AGVMOptimWrapper)


def _own_schedulers(cfg):
    """The ``param_scheduler`` configs that act on the run's AGVM wrapper.

    One list serves every optimizer; a dict of lists per optimizer (an
    ``OptimWrapperDict``) gives the list of the one ``optim_wrapper`` entry
    of an AGVM type, or all lists if that entry is not unique.
    """
    schedulers = cfg.get('param_scheduler')
    if not isinstance(schedulers, dict) or 'type' in schedulers:
        return schedulers
    wrappers = cfg.get('optim_wrapper') or {}
    names = [name for name, entry in wrappers.items()
             if isinstance(entry, dict) and _is_agvm(entry.get('type'))]
    return schedulers.get(names[0]) if len(names) == 1 else schedulers


def ema_interval_messages(hook_cfgs: Sequence[dict],
                          accumulative_counts: int) -> List[str]:
    """An ``EMAHook`` averaging every micro-batch of an accumulated step.

    mmengine's ``EMAHook`` updates after every runner iteration (its
    ``interval``, default 1), but with ``accumulative_counts = K`` the
    weights change once per K iterations, so its momentum acts K times
    faster than the recipe means; ``interval=K`` updates once per step.

    Args:
        hook_cfgs (Sequence[dict]): The run's hook configs
            (``custom_hooks`` and the values of ``default_hooks``).
        accumulative_counts (int): K.

    Returns:
        list[str]: One message per such hook.
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
                f'{hook_type.__name__} interval={interval} counts runner '
                f'iterations, but with optim_wrapper.accumulative_counts='
                f'{accumulative_counts} the weights change every '
                f'{accumulative_counts}: set interval={accumulative_counts} '
                f'in its custom_hooks entry.')
    return messages


# ------------------------------------------------------------ the wrapper
@OPTIM_WRAPPERS.register_module()
class AGVMOptimWrapper(OptimWrapper):
    """Optimizer wrapper with AGVM per-module learning-rate modulation.

    Implements the Adaptive Gradient Variance Modulator (Xue et al.,
    "Large-batch Optimization for Dense Visual Predictions", NeurIPS 2022,
    arXiv 2210.11078, Sec. 3; reference implementation github.com/Sense-X/AGVM
    ``agvm/optim/agvm_optimizer_hook.py``). Every ``update_interval``
    optimizer steps inside ``[start_iter, end_iter)`` it measures, per module
    i, the gradient variance d_i = 1 - cos(G_A, G_B) between two independent
    halves of the batch, turns it into mu_i = sqrt(clamp(d_0 / d_i,
    *ratio_range)) and blends mu_i into the factor s_i (EMA, momentum
    ``ema_momentum``, s_i = 1 at the start). Each step in the window
    multiplies the learning rate of every param group of module i by s_i and
    restores it after ``optimizer.step()``, so param schedulers and the logged
    base LR never see the factor.

    Halves: with world size >= 2, the two halves of the ranks
    (:class:`mmext.agvm.exchange.DistributedHalves`); in one process, the
    first and second half of the ``accumulative_counts`` micro-batches.

    Build it with :class:`mmext.agvm.AGVMOptimWrapperConstructor`, which
    tags every param group with its module (parameters outside
    ``module_names`` form the ``'others'`` groups, factor 1).

    Args:
        optimizer (Optimizer): Optimizer with tagged param groups.
        module_names (Sequence[str]): Modulated modules, the first is the
            anchor (module 0). Filled in by the constructor.
        update_interval (int): tau, optimizer steps between re-estimates.
            Defaults to 10.
        ema_momentum (float): alpha of the EMA, in [0, 1). Defaults to 0.97.
        ratio_range (tuple[float, float]): Clamp of d_anchor / d_i before the
            square root, ``0 < lo <= hi``. Defaults to (0.5, 10.0).
        start_iter (int): First runner iteration with AGVM. Defaults to 0.
        end_iter (int, optional): First iteration without AGVM again; None
            for the end of training. Defaults to None.
        statistic (str): ``'grad'`` measures the raw gradient (SGD);
            ``'adam'`` the Adam-preconditioned gradient g / (sqrt(v) + eps)
            with the optimizer's ``exp_avg_sq`` (AdamW mode). Defaults to
            ``'grad'``.
        clip_grad_window (tuple[int, int], optional): Apply ``clip_grad``
            only for runner iterations in ``[begin, end)`` (the released
            recipes clip in the 200 iterations before AGVM starts); None
            clips always. Defaults to None.
        **kwargs: ``accumulative_counts``, ``clip_grad`` and, for the AMP
            variant, ``loss_scale``/``dtype``: as in mmengine's wrappers.

    Raises:
        ValueError: On an unknown or invalid option (the option table),
            param groups not tagged by the constructor, or when a single
            process has no two halves (``accumulative_counts`` must then be
            even and >= 2).
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
                 **kwargs):
        _check_options(type(self), dict(
            kwargs, accumulative_counts=kwargs.get('accumulative_counts', 1),
            module_names=module_names, update_interval=update_interval,
            ema_momentum=ema_momentum, ratio_range=ratio_range,
            start_iter=start_iter, end_iter=end_iter, statistic=statistic,
            clip_grad_window=clip_grad_window))
        super().__init__(optimizer=optimizer, **kwargs)
        if not module_names or any('agvm_module' not in group
                                   for group in optimizer.param_groups):
            raise ValueError(
                'AGVMOptimWrapper needs param groups tagged by module: set '
                "constructor='mmext.AGVMOptimWrapperConstructor' in "
                "optim_wrapper (the recipe's own constructor goes to "
                'base_constructor)')
        if statistic == 'adam' and 'betas' not in optimizer.defaults:
            raise ValueError(
                f"statistic='adam' needs Adam's second moment, which "
                f'{type(optimizer).__name__} does not keep; use '
                f"statistic='grad' or an Adam-family optimizer (AdamW)")
        if clip_grad_window is not None and not kwargs.get('clip_grad'):
            raise ValueError(
                f'clip_grad_window={tuple(clip_grad_window)} limits '
                'clip_grad, which is not set; add optim_wrapper.clip_grad '
                '(e.g. dict(max_norm=1.0)) or remove clip_grad_window')
        self.ratio_range = tuple(ratio_range)
        self.schedule = AGVMSchedule(update_interval, start_iter, end_iter,
                                     self._counts[1], clip_grad_window)
        self.statistic = statistic
        self._clipping = bool(kwargs.get('clip_grad'))
        self.layout = GradientLayout(optimizer, module_names)
        self.module_names = self.layout.module_names
        # Factors are consumed on the host (Python LRs) every step, so they
        # and the logged d_i live there; the M statistics of a re-estimate
        # cross once (see update_factors).
        self.ema = ModulationEMA(len(self.module_names), ema_momentum)
        self.last_variance = torch.full((len(self.module_names), ),
                                        float('nan'), dtype=torch.float64)
        self.halves = self._build_halves()
        self._warned_no_takeover = False

    def _build_halves(self):
        world_size = get_world_size()
        if world_size >= 2:
            return DistributedHalves(self.layout, world_size, get_rank(),
                                     self._precondition)
        counts = self._counts[1]
        if counts < 2 or counts % 2:
            raise ValueError(
                'AGVM in one process compares accumulated micro-batches: set '
                'optim_wrapper.accumulative_counts to an even number >= 2 '
                f'(got {counts}), or train with >= 2 processes')
        return AccumulationHalves(self.layout, counts, self._precondition)

    def initialize_count_status(self, model: nn.Module, init_counts: int,
                                max_counts: int) -> None:
        """mmengine's set-up of the counters, then the checks against the
        run.

        mmengine's ``Runner.train`` calls it once the loop, the schedulers
        and any resumed state are there, whatever the runner class. It logs
        :meth:`summary`, warns about window values the run cannot honour
        (:meth:`AGVMSchedule.unused_values`) and, with the run's config
        (:func:`mmext.compat.run_config`; none without a runner), refuses
        mmengine's ``auto_scale_lr`` with accumulation
        (:func:`mmext.lr_scaling.check_auto_scale_lr`) and warns about a
        ``start_iter`` inside an LR warm-up and an ``EMAHook`` that updates
        every micro-batch (:func:`ema_interval_messages`).

        Args:
            model (nn.Module): The training model.
            init_counts (int): Iterations done (``runner.iter``).
            max_counts (int): Iterations of the run (``max_iters``).

        Raises:
            ValueError: From :func:`mmext.lr_scaling.check_auto_scale_lr`.
        """
        super().initialize_count_status(model, init_counts, max_counts)
        print_log(self.summary(max_counts), logger='current',
                  level=logging.INFO)
        for message in self.schedule.unused_values(max_counts):
            warn(message)
        cfg = run_config(self.message_hub)
        if cfg is None:
            return
        check_auto_scale_lr(cfg.get('auto_scale_lr'), self, self.message_hub)
        max_epochs = (cfg.get('train_cfg') or {}).get('max_epochs')
        epoch_length = max_counts // max_epochs if max_epochs else 1
        messages = self.schedule.inside_warmup(
            warmup_ends(_own_schedulers(cfg), epoch_length))
        hooks = list(cfg.get('custom_hooks') or []) + list(
            (cfg.get('default_hooks') or {}).values())
        messages += ema_interval_messages(hooks, self._counts[1])
        for message in messages:
            warn(message)

    def rescale_iterations(self, scale) -> List[str]:
        """Rescale the runner-iteration options (``start_iter``,
        ``end_iter``, ``clip_grad_window``) with ``scale(iterations)``, as
        ``mmext.Runner``'s ``auto_scale_schedule`` does to the recipe's
        other iteration counts; ``update_interval`` counts optimizer steps
        and stays. A window that rounding would empty keeps one iteration,
        as the runner does for param schedulers
        (:func:`mmext.scheduler_checks.rescale_schedulers`).

        Returns:
            list[str]: ``'optim_wrapper.<option> a -> b'`` per change.
        """
        old = self.schedule
        window = old.clip_grad_window
        if window is not None:
            begin = scale(window[0])
            window = (begin, max(scale(window[1]), begin + 1))
        start = scale(old.start_iter)
        end = (None if old.end_iter == math.inf else max(
            scale(old.end_iter), start + 1))
        self.schedule = AGVMSchedule(old.update_interval, start, end,
                                     old.accumulative_counts, window)
        return [
            f'optim_wrapper.{name} {a} -> {b}' for name, a, b in (
                ('start_iter', old.start_iter, self.schedule.start_iter),
                ('end_iter', old.end_iter, self.schedule.end_iter),
                ('clip_grad_window', old.clip_grad_window, window))
            if a != b
        ]

    def summary(self, max_iters: Optional[int] = None) -> str:
        """What AGVM will do in this run, one log block
        (:func:`run_summary`)."""
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
        """mmengine's context; on DDP re-estimation steps, the halves'.

        DDP decides at forward time how the backward reduces; on a
        re-estimation step the halves must be measured before the ranks'
        gradients are averaged: by AGVM's DDP communication hook, or, for
        other models, by switching DDP's reduction off (see
        :meth:`DistributedHalves.measuring`).

        Args:
            model (nn.Module): The (possibly DDP-wrapped) training model.
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
        """Back-propagate; in one process, remember the first half's grads.

        Args:
            loss (Tensor): The (scaled) loss of the current micro-batch.
            **kwargs: Passed to ``Tensor.backward``.
        """
        iteration = self._counts[0]
        super().backward(loss, **kwargs)
        if not self.distributed and self._measures(iteration):
            self.halves.after_backward(
                self.schedule.step_index(iteration),
                iteration + 1 - self.schedule.window_start(iteration))

    def step(self, **kwargs) -> None:
        """Re-estimate if due, then step with the factors applied.

        Args:
            **kwargs: Passed to ``optimizer.step``.
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
        """Skip mmengine's clipping for one step and drop its stale log.

        The message hub keeps the last ``grad_norm`` it was given; once
        clipping stops the key is removed, so no stale norm is logged.
        """
        with grad_clipping_off(self) as was_clipping:
            if was_clipping:
                drop_logged_scalar(self.message_hub,
                                   f'train/{self.grad_name}')
            yield

    def update_factors(self, step: int) -> None:
        """Measure the halves of optimizer step ``step`` and update the EMA
        factors (the re-estimate; :meth:`step` calls it when due)."""
        stats = self._collect(step)
        if stats is None:
            return
        # The one device-to-host transfer of a re-estimate: 3M float64.
        stats = HalfStatistics(*torch.stack(tuple(stats)).cpu())
        d, valid = gradient_variance(stats)
        mu = modulation_factors(d, valid, 0, self.ratio_range)
        self.ema.update(mu)
        self.last_variance = torch.where(valid, d, self.last_variance)
        self._log_estimate(step, d, valid)

    def _log_estimate(self, step: int, d: Tensor, valid: Tensor) -> None:
        """Write one re-estimate to the visualizer backends.

        ``SCALAR_VARIANCE/<module>`` (d_i) and ``SCALAR_ESTIMATE/<module>``
        (the factor after this update) go to ``scalars.json``/TensorBoard
        at the iteration of the re-estimate itself. Through the message hub
        they would only be seen every ``logger.interval`` iterations,
        repeating an estimate between re-estimates or skipping some.
        """
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

    def _collect(self, step: int) -> Optional[HalfStatistics]:
        stats = self.halves.measure(step)
        if stats is None and self.distributed:
            # DDP already averaged the grads (no optim_context around the
            # forward): both halves would look identical.
            if not self._warned_no_takeover:
                print_log(
                    'AGVM: a re-estimation step ran its forward outside '
                    'optim_wrapper.optim_context(model), so DDP already '
                    "averaged the halves; skipped. Use the model wrapper's "
                    'train_step.', logger='current', level=logging.WARNING)
                self._warned_no_takeover = True
        return stats

    def _precondition(self, params: Sequence[Tensor], flat: Tensor) -> Tensor:
        """The vector whose cosine the statistic measures (see
        :func:`mmext.agvm.exchange.adam_precondition` for ``'adam'``)."""
        if self.statistic == 'grad':
            return flat
        return adam_precondition(self.optimizer, params, flat)

    def state_dict(self) -> dict:
        """The optimizer's state dict plus ``'agvm'``: module names, EMA
        factors (float64 tensor (M,)), update count and last d_i.

        The iteration counter is not saved: the train loop restores it from
        ``runner.iter`` when training resumes.
        """
        state = super().state_dict()
        state['agvm'] = dict(
            module_names=list(self.module_names),
            ema=self.ema.state_dict(),
            last_variance=self.last_variance.clone())
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict` output.

        Raises:
            ValueError: Naming what to do instead, if the checkpoint comes
                from a run without AGVM (its param groups are not split by
                module, so its optimizer state cannot be mapped), modulated
                other modules, or split its param groups differently (other
                ``base_constructor``, ``paramwise_cfg`` or frozen layers).
        """
        state_dict = dict(state_dict)
        agvm = state_dict.pop('agvm', None)
        if agvm is None:
            raise ValueError(
                'the checkpoint has no AGVM state: it comes from a run '
                "without AGVM; resume with that run's optim_wrapper, " +
                restart_hint('CKPT'))
        saved_names = list(agvm['module_names'])
        if saved_names != self.module_names:
            raise ValueError(
                f'checkpoint AGVM modules {saved_names} differ from '
                f'module_names {self.module_names}. Resume with '
                f'optim_wrapper.module_names={saved_names}, '
                + restart_hint('CKPT'))
        saved = [(g.get('agvm_module'), len(g['params']))
                 for g in state_dict['param_groups']]
        current = [(g['agvm_module'], len(g['params']))
                   for g in self.optimizer.param_groups]
        if saved != current:
            raise ValueError(
                f"the checkpoint's optimizer has {len(saved)} param groups "
                f'(module, size) {saved}, this run {len(current)}: {current}. '
                f'Resume with its optim_wrapper.base_constructor, '
                f'paramwise_cfg and frozen layers, ' + restart_hint('CKPT'))
        self.ema.load_state_dict(agvm['ema'])
        self.last_variance = torch.as_tensor(
            agvm['last_variance'], dtype=torch.float64, device='cpu').clone()
        super().load_state_dict(state_dict)


@OPTIM_WRAPPERS.register_module()
class AGVMAmpOptimWrapper(AGVMOptimWrapper, AmpOptimWrapper):
    """:class:`AGVMOptimWrapper` with mmengine's CUDA mixed precision.

    The MRO puts AGVM's steps around ``AmpOptimWrapper``'s: the forward runs
    under autocast, the backward scales the loss, and the halves are measured
    on the scaled gradients (the cosine does not depend on the loss scale);
    the loss scaler unscales, skips non-finite steps and updates as usual.
    ``tools/train.py --amp`` switches ``mmext.AGVMOptimWrapper`` to it.

    Args:
        loss_scale (str | float | dict): As in ``AmpOptimWrapper``.
        dtype (str | torch.dtype, optional): As in ``AmpOptimWrapper``.
        **kwargs: The options of :class:`AGVMOptimWrapper`.

    Raises:
        AssertionError: Without CUDA (raised by ``AmpOptimWrapper``).
    """


# ------------------------------------------------- needs mmext.Runner
@register_resume_guard
def agvm_checkpoint_needs_the_wrapper(runner, checkpoint: dict,
                                       filename: str,
                                       resume_optimizer: bool) -> None:
    """Refuse to resume AGVM optimizer state into a wrapper without AGVM.

    Only a runner sees this case (the config's wrapper knows nothing of
    AGVM), so it holds with ``mmext.Runner`` only
    (:func:`mmext.runner.register_resume_guard`); the opposite direction is
    refused by :meth:`AGVMOptimWrapper.load_state_dict` with any runner.

    Raises:
        ValueError: Naming the AGVM wrapper to use, or to start from the
            weights.
    """
    saved = (checkpoint.get('optimizer') or {}) if resume_optimizer else {}
    if 'param_groups' in saved:
        saved = {'': saved}
    for name, wrapper in optim_wrappers(runner.optim_wrapper).items():
        agvm = (saved.get(name) or {}).get('agvm')
        if (agvm is not None and isinstance(wrapper, BaseOptimWrapper)
                and not isinstance(wrapper, AGVMOptimWrapper)):
            raise ValueError(
                f'{filename} comes from an AGVM run (module_names '
                f"{list(agvm['module_names'])}): the config's "
                f'{type(wrapper).__name__} cannot map its param groups. '
                f"Resume with type='mmext.AGVMOptimWrapper', constructor="
                f"'mmext.AGVMOptimWrapperConstructor', "
                + restart_hint(filename))
