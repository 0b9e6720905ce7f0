"""AGVM's optimizer wrapper for mmengine (the CUDA mixed-precision variant is
in :mod:`mmext.agvm.amp`)."""
import logging
import math
import warnings
from contextlib import ExitStack, contextmanager
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from mmengine.dist import get_rank, get_world_size
from mmengine.logging import print_log
from mmengine.optim import OptimWrapper
from mmengine.visualization import Visualizer
from torch import Tensor, nn
from torch.optim import Optimizer

from mmext.compat import (accumulative_counts, drop_logged_scalar,
                          grad_clipping_off, max_counts, run_config)
from mmext.lr_scaling import check_auto_scale_lr, scaled_lrs
from mmext.registry import OPTIM_WRAPPERS
from .exchange import AccumulationHalves, DistributedHalves
from .layout import GradientLayout, adam_precondition
from .options import check_wrapper_options
from .schedule import AGVMSchedule
from .statistics import (DEFAULT_RATIO_RANGE, HalfStatistics, ModulationEMA,
                         gradient_variance, modulation_factors)
from .summary import halves_description, run_summary

__all__ = [
    'AGVMOptimWrapper', 'SCALAR_FACTOR', 'SCALAR_VARIANCE', 'SCALAR_ESTIMATE'
]

# Logged scalars, one per module (``<prefix>/<module name>``): the factor
# applied at every optimizer step (through the message hub, so at the
# logger's interval as ``train/agvm_mu/...``), and, at each re-estimate,
# d_i and the factor after the update (straight to the visualizer backends).
SCALAR_FACTOR = 'agvm_mu'
SCALAR_VARIANCE = 'agvm_d'
SCALAR_ESTIMATE = 'agvm_s'


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
    base LR never see the factor. The math lives in :mod:`mmext.agvm`.

    Halves: with world size >= 2, the two halves of the ranks (measured in
    AGVM's DDP communication hook during the backward pass of re-estimation
    steps, or, without it, by reducing the flattened gradients itself, see
    :class:`DistributedHalves`); in one process, the first and second half of
    the ``accumulative_counts`` micro-batches. Every buffer and statistic is
    on the parameters' device; the M statistics of a re-estimate are the
    only values moved to the host, where the factors live.

    Build it with :class:`AGVMOptimWrapperConstructor`, which tags every param
    group with its module (parameters outside ``module_names`` form the
    ``'others'`` groups, factor 1).

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
        ValueError: On invalid options, untagged param groups, or when a
            single process has no two halves (``accumulative_counts`` must
            then be even and >= 2).
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
        self.check_options(dict(
            kwargs, module_names=module_names, update_interval=update_interval,
            ema_momentum=ema_momentum, ratio_range=ratio_range,
            start_iter=start_iter, end_iter=end_iter, statistic=statistic,
            clip_grad_window=clip_grad_window))
        super().__init__(optimizer=optimizer, **kwargs)
        if not module_names:
            raise ValueError(
                'AGVMOptimWrapper needs module_names; build it with '
                "constructor='mmext.AGVMOptimWrapperConstructor' (and move "
                "the recipe's own optim_wrapper.constructor, if any, to "
                'optim_wrapper.base_constructor)')
        self.ratio_range = tuple(ratio_range)
        if statistic == 'adam' and 'betas' not in optimizer.defaults:
            raise ValueError(
                f"statistic='adam' preconditions with Adam's second moment, "
                f'which {type(optimizer).__name__} does not keep; use '
                f"statistic='grad' or an Adam-family optimizer (AdamW)")
        self.schedule = AGVMSchedule(update_interval, start_iter, end_iter,
                                     self._counts[1], clip_grad_window)
        if clip_grad_window is not None and not kwargs.get('clip_grad'):
            raise ValueError(
                f'clip_grad_window={self.schedule.clip_grad_window} limits '
                'clip_grad, which is not set, so it would do nothing; add '
                'optim_wrapper.clip_grad (e.g. dict(max_norm=1.0)) or remove '
                'clip_grad_window')
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

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Check an ``optim_wrapper`` config's AGVM options by name, type and
        range (:func:`mmext.agvm.options.check_wrapper_options`); the
        constructor and :class:`mmext.runner.Runner` call it before any model
        is built, the wrapper again when it is built.

        Raises:
            ValueError: Naming the option, the value, what is expected and an
                example; for an unknown option, all valid names.
        """
        check_wrapper_options(cls, options)

    def _build_halves(self):
        world_size = get_world_size()
        if world_size >= 2:
            return DistributedHalves(self.layout, world_size, get_rank(),
                                     self._precondition)
        counts = self._counts[1]
        if counts < 2 or counts % 2:
            raise ValueError(
                'AGVM compares the gradients of two halves of the batch. In '
                'a single process they are the first and second half of the '
                'accumulated micro-batches, so set optim_wrapper.'
                f'accumulative_counts to an even number >= 2 (got {counts}), '
                'or train with >= 2 processes (tools/dist_train.sh CONFIG 2)')
        return AccumulationHalves(self.layout, counts, self._precondition)

    def initialize_count_status(self, model: nn.Module, init_counts: int,
                                max_counts: int) -> None:
        """mmengine's set-up of the counters, then checks against the run.

        The train loop calls it once its length is known (after resuming).
        It logs :meth:`summary`. Window values that the run cannot honour warn, naming the value
        (:meth:`AGVMSchedule.unused_values`). LRs that a runner other than
        ``mmext.Runner`` scaled (mmengine's ``auto_scale_lr``, which leaves
        out ``accumulative_counts``) raise
        (:func:`mmext.lr_scaling.check_auto_scale_lr`).

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
            warnings.warn(message)
        cfg = run_config(self.message_hub)
        if cfg is not None:
            check_auto_scale_lr(cfg.get('auto_scale_lr'), self,
                                self.message_hub)

    def rescale_iterations(self, scale) -> List[str]:
        """Rescale the runner-iteration options (``start_iter``,
        ``end_iter``, ``clip_grad_window``) with ``scale(iterations)``, as
        ``mmext.Runner``'s ``auto_scale_schedule`` does to the recipe's
        other iteration counts; ``update_interval`` counts optimizer steps
        and stays.

        Returns:
            list[str]: ``'optim_wrapper.<option> a -> b'`` per change.
        """
        old = self.schedule
        window = old.clip_grad_window and tuple(
            scale(v) for v in old.clip_grad_window)
        end = None if old.end_iter == math.inf else scale(old.end_iter)
        self.schedule = AGVMSchedule(old.update_interval,
                                     scale(old.start_iter), end,
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
        (:func:`mmext.agvm.summary.run_summary`)."""
        world_size = self.halves.world_size if self.distributed else 1
        return run_summary(
            self.module_names, [hi - lo for lo, hi in self.layout.bounds],
            halves_description(world_size, self._counts[1]), self.schedule,
            self._clipping, self.statistic, max_iters)

    @property
    def distributed(self) -> bool:
        """Whether the halves are halves of the ranks."""
        return isinstance(self.halves, DistributedHalves)

    def uses_comm_hook(self, model: nn.Module) -> bool:
        """Whether re-estimation steps of ``model`` are measured in AGVM's
        DDP communication hook, registered at its first training step (False
        in one process, before that step, for a model that is not DDP, or
        whose DDP has another hook: the flat fallback is then used)."""
        return self.distributed and self.halves.is_hooked(model)

    @property
    def factors(self) -> Dict[str, float]:
        """Current EMA factor s_i of each modulated module."""
        return dict(zip(self.module_names, self.ema.factors.tolist()))

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
        (the factor after this update) go to ``scalars.json``/TensorBoard at the iteration of
        the re-estimate itself. Through the message hub they would only be
        seen every ``logger.interval`` iterations, repeating an estimate
        between re-estimates or skipping some.
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
                    'AGVM: the forward of a re-estimation step ran outside '
                    'optim_wrapper.optim_context(model), so DDP reduced the '
                    'gradients and the halves are lost; skipping the '
                    're-estimate. Use the model wrapper\'s train_step.',
                    logger='current', level=logging.WARNING)
                self._warned_no_takeover = True
        return stats

    def _precondition(self, params: Sequence[Tensor], flat: Tensor) -> Tensor:
        """The vector whose cosine the statistic measures (see
        :func:`mmext.agvm.layout.adam_precondition` for ``'adam'``)."""
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
                'without AGVM, whose optimizer param groups are not split by '
                'module. Start the AGVM run from its weights with '
                'load_from=CKPT (no --resume), or resume it with the plain '
                "optim_wrapper of the checkpoint's run.")
        if list(agvm['module_names']) != self.module_names:
            raise ValueError(
                f"checkpoint AGVM modules {list(agvm['module_names'])} differ "
                f'from module_names {self.module_names}. Resume with '
                f"optim_wrapper.module_names={list(agvm['module_names'])}, "
                f'or start from its weights with load_from=CKPT (no '
                f'--resume) to modulate other modules.')
        saved = [(g.get('agvm_module'), len(g['params']))
                 for g in state_dict['param_groups']]
        current = [(g['agvm_module'], len(g['params']))
                   for g in self.optimizer.param_groups]
        if saved != current:
            raise ValueError(
                f'the checkpoint\'s optimizer has {len(saved)} param groups '
                f'(module, size) {saved}, this run {len(current)}: '
                f'{current}. The recipe\'s param groups changed '
                f'(optim_wrapper.base_constructor, paramwise_cfg, or which '
                f'layers are frozen). Resume with the settings of the '
                f"checkpoint's run, or start from its weights with "
                f'load_from=CKPT (no --resume).')
        self.ema.load_state_dict(agvm['ema'])
        self.last_variance = torch.as_tensor(
            agvm['last_variance'], dtype=torch.float64, device='cpu').clone()
        super().load_state_dict(state_dict)
