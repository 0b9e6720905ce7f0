"""``mmext.Runner``: mmengine's runner with the effective batch and checks.

The runner knows neither method. Components that move the param schedulers
onto their own axis say so with a class attribute
(``remaps_param_schedulers``); components whose checkpoints a config without
them must not resume register a guard with :func:`register_resume_guard`
(the modules listed by mmext's registries register theirs on import).
"""
import warnings
from typing import Callable, List, Optional

from mmengine.optim import OptimWrapper
from mmengine.runner import EpochBasedTrainLoop
from mmengine.runner import Runner as MMEngineRunner

from .compat import (optim_wrapper_counts, train_loader_batch_size,
                     trusted_checkpoint_loading)
from .lr_scaling import EFFECTIVE_BATCH_INFO, effective_batch, optim_wrappers
from .registry import HOOKS, OPTIM_WRAPPERS, RUNNERS
from .scheduler_checks import (resumed_batch_mismatch, scheduler_configs,
                               scheduler_states, unused_scheduler_values)

__all__ = [
    'Runner', 'ResumeGuard', 'register_resume_guard', 'restart_hint',
    'EFFECTIVE_BATCH_KEY'
]

# Where mmext.Runner's checkpoints record the run's effective batch per
# optimizer (``meta``).
EFFECTIVE_BATCH_KEY = 'mmext_effective_batch'

# guard(runner, checkpoint, filename, resume_optimizer): raises ValueError,
# naming what to do instead, for a checkpoint the runner's config cannot
# resume.
ResumeGuard = Callable[['Runner', dict, str, bool], None]
_RESUME_GUARDS: List[ResumeGuard] = []


def register_resume_guard(guard: ResumeGuard) -> ResumeGuard:
    """Add a check that :class:`Runner` runs on every checkpoint it resumes.

    Usable as a decorator. Each guard is called with the runner, the loaded
    checkpoint, its path and whether the optimizer state is restored, before
    any state is restored, and raises ``ValueError`` to refuse it.

    Args:
        guard (callable): The check.

    Returns:
        callable: ``guard`` itself.
    """
    if guard not in _RESUME_GUARDS:
        _RESUME_GUARDS.append(guard)
    return guard


def restart_hint(filename: str) -> str:
    """The alternative every refused resume offers: start from the weights."""
    return (f'or start from its weights with load_from={filename} (no '
            f'--resume).')


@RUNNERS.register_module(name='Runner')
class Runner(MMEngineRunner):
    """mmengine's ``Runner`` with the effective batch and mmext's checks.

    ``runner_type='mmext.Runner'`` in a config (mmext's ``tools/train.py``
    and ``tools/test.py`` use it unless the config names another runner)
    changes four things for any recipe:

    * The batch is the effective batch: loader batch x world size x
      ``accumulative_counts``. It is logged when training starts, and
      ``auto_scale_lr`` scales each optimizer's LR by effective batch /
      ``base_batch_size`` (mmengine leaves out the accumulation).
    * Param scheduler values the run cannot honour (a warm-up longer than
      the run, milestones after its end, ...) warn, naming the value
      (:func:`mmext.scheduler_checks.unused_scheduler_values`), unless a
      hook moves the schedulers onto its own axis and checks them there
      (a hook class with ``remaps_param_schedulers = True``).
    * ``resume`` refuses a checkpoint written with mmext components (AGVM
      optimizer state, a multigrid schedule) that the config does not have,
      naming what to do instead (the guards of
      :func:`register_resume_guard`); the opposite direction is checked by
      the components themselves, so it holds with any runner. Checkpoints
      record the effective batch (``meta[EFFECTIVE_BATCH_KEY]``), and
      resuming iteration-based param schedulers built for another one
      warns (:func:`mmext.scheduler_checks.resumed_batch_mismatch`).
    * Its own checkpoint loads (``resume``, ``load_from``) unpickle whole
      mmengine checkpoints, as torch < 2.6 did
      (:func:`mmext.compat.trusted_checkpoint_loading`).
    """

    def scale_lr(self, optim_wrapper: OptimWrapper,
                 auto_scale_lr: Optional[dict] = None) -> None:
        """Log the effective batch; scale LRs by it if ``auto_scale_lr``.

        Args:
            optim_wrapper (OptimWrapper | OptimWrapperDict): Built wrapper(s).
            auto_scale_lr (dict, optional): ``enable`` and
                ``base_batch_size`` (the effective batch the config's LR is
                meant for), as in mmengine.

        Raises:
            ValueError: If enabled without ``base_batch_size``.
        """
        loader_batch = train_loader_batch_size(self)
        enabled = bool(auto_scale_lr and auto_scale_lr.get('enable', False))
        if enabled and 'base_batch_size' not in auto_scale_lr:
            raise ValueError('auto_scale_lr.enable=True needs '
                             'auto_scale_lr.base_batch_size')
        batches = {}
        for name, wrapper in optim_wrappers(optim_wrapper).items():
            counts = optim_wrapper_counts(wrapper)[1]
            batch = loader_batch * self.world_size * counts
            batches[name] = batch
            prefix = f'{name}: ' if name else ''
            message = (f'{prefix}effective batch '
                       f'{effective_batch(loader_batch, self.world_size, counts)}')
            if enabled:
                ratio = batch / auto_scale_lr['base_batch_size']
                for group in wrapper.optimizer.param_groups:
                    group['lr'] = group['lr'] * ratio
                message += (f'; auto_scale_lr: LR x {ratio:g} (effective '
                            f'batch / base_batch_size '
                            f"{auto_scale_lr['base_batch_size']})")
            self.logger.info(message)
        # Not resumed: a later run with mmengine's runner must not inherit it.
        self.message_hub.update_info(EFFECTIVE_BATCH_INFO, batches,
                                     resumed=False)

    def build_param_scheduler(self, scheduler):
        """mmengine's, warning first about scheduler values the run cannot
        honour (:func:`unused_scheduler_values`); arguments as there."""
        loop = self.train_loop
        remapped = any(
            getattr(hook, 'remaps_param_schedulers', False)
            for hook in self.hooks)
        if (loop is not None and scheduler_configs(scheduler)
                and not remapped):
            max_epochs = (loop.max_epochs
                          if isinstance(loop, EpochBasedTrainLoop) else None)
            for message in unused_scheduler_values(scheduler, max_epochs,
                                                   loop.max_iters):
                warnings.warn(message)
        return super().build_param_scheduler(scheduler)

    def save_checkpoint(self, *args, meta: Optional[dict] = None,
                        **kwargs) -> None:
        """mmengine's, recording the effective batch per optimizer in
        ``meta[EFFECTIVE_BATCH_KEY]``; arguments as there."""
        batches = self.message_hub.get_info(EFFECTIVE_BATCH_INFO)
        if batches is not None:
            meta = dict(meta or {}, **{EFFECTIVE_BATCH_KEY: dict(batches)})
        super().save_checkpoint(*args, meta=meta, **kwargs)

    # Set while ``resume`` runs: None, or whether it restores the optimizer.
    _resuming: Optional[bool] = None

    def resume(self, filename: str, resume_optimizer: bool = True,
               *args, **kwargs) -> None:
        """mmengine's ``resume``, refusing checkpoints of mmext components
        the config lacks (see :meth:`check_resume`); arguments as there."""
        self._resuming = resume_optimizer
        try:
            super().resume(filename, resume_optimizer, *args, **kwargs)
        finally:
            self._resuming = None

    def load_checkpoint(self, filename: str, *args, **kwargs) -> dict:
        """mmengine's ``load_checkpoint`` with trusted local loading; when
        resuming, also :meth:`check_resume` before any state is restored."""
        with trusted_checkpoint_loading():
            checkpoint = super().load_checkpoint(filename, *args, **kwargs)
        if self._resuming is not None:
            self.check_resume(checkpoint, filename, self._resuming)
            # The effective batch is set anew by this run (and not resumed);
            # mmengine would warn that a non-resumed key is loaded.
            checkpoint.get('message_hub', {}).get('resumed_keys', {}).pop(
                EFFECTIVE_BATCH_INFO, None)
        return checkpoint

    def check_resume(self, checkpoint: dict, filename: str,
                     resume_optimizer: bool = True) -> None:
        """Run every registered resume guard on ``checkpoint``.

        The modules that mmext's registries list are imported first, so the
        guard of a component the config does not use is there too.

        Args:
            checkpoint (dict): The loaded checkpoint.
            filename (str): Its path, for the message.
            resume_optimizer (bool): Whether the optimizer state is restored.

        Warns (``UserWarning``) when the resumed iteration-based param
        schedulers were built for another effective batch.

        Raises:
            ValueError: From a guard, naming what to do instead.
        """
        for registry in (HOOKS, OPTIM_WRAPPERS):
            registry.import_from_location()
        for guard in _RESUME_GUARDS:
            guard(self, checkpoint, filename, resume_optimizer)
        message = resumed_batch_mismatch(
            checkpoint.get('meta', {}).get(EFFECTIVE_BATCH_KEY),
            self.message_hub.get_info(EFFECTIVE_BATCH_INFO),
            scheduler_states(checkpoint.get('param_schedulers', [])),
            [c['type'] for c in scheduler_configs(
                self.cfg.get('param_scheduler'))], filename)
        if message:
            warnings.warn(message)
