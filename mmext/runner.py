"""``mmext.Runner``: mmengine's runner with the effective batch and checks.

It knows neither method (docs/en/design.md, "Layers").
"""
import os
import os.path as osp
from typing import Callable, List, Optional, Tuple

from mmengine.hooks import CheckpointHook
from mmengine.optim import OptimWrapper
from mmengine.runner import EpochBasedTrainLoop, IterBasedTrainLoop
from mmengine.runner import Runner as MMEngineRunner

from .compat import (accumulative_counts, set_train_loop_length,
                     train_loader_batch_size, trusted_checkpoint_loading)
from .frozen_check import frozen_without_weights
from .log import warn
from .lr_scaling import EFFECTIVE_BATCH_INFO, effective_batch, optim_wrappers
from .registry import HOOKS, OPTIM_WRAPPERS, RUNNERS
from .scheduler_checks import (rescale_iterations, rescale_schedulers,
                               resumed_batch_mismatch, schedule_ratio,
                               scheduler_configs, scheduler_states,
                               unused_scheduler_values, warmup_images)

__all__ = [
    'Runner', 'ResumeGuard', 'register_resume_guard', 'restart_hint',
    'EFFECTIVE_BATCH_KEY', 'check_dataset_config', 'single_class_subset'
]

# The ``meta`` key of the effective batch per optimizer in checkpoints.
EFFECTIVE_BATCH_KEY = 'mmext_effective_batch'

# guard(runner, checkpoint, filename, resume_optimizer); raises ValueError.
ResumeGuard = Callable[['Runner', dict, str, bool], None]
_RESUME_GUARDS: List[ResumeGuard] = []


def register_resume_guard(guard: ResumeGuard) -> ResumeGuard:
    """Add a check that :class:`Runner` runs on every checkpoint it resumes.

    Usable as a decorator. Guards run before any state is restored and
    raise ``ValueError`` to refuse the checkpoint.

    Args:
        guard (callable): ``guard(runner, checkpoint, filename,
            resume_optimizer)``.

    Returns:
        callable: ``guard`` itself.
    """
    if guard not in _RESUME_GUARDS:
        _RESUME_GUARDS.append(guard)
    return guard


def check_dataset_config(dataset_cfg: dict) -> None:
    """Refuse a dataset whose annotation file is missing or empty.

    mmengine fails on both deep inside the dataset, with no word of the
    folder a relative path is relative to.

    Args:
        dataset_cfg (dict): A loader's ``dataset`` (wrappers: their
            ``dataset``).

    Raises:
        FileNotFoundError: For a missing ``ann_file``.
        ValueError: For an empty ``ann_file``.
    """
    while isinstance(dataset_cfg.get('dataset'), dict):
        dataset_cfg = dataset_cfg['dataset']
    ann_file = dataset_cfg.get('ann_file')
    if not isinstance(ann_file, str) or not ann_file or '://' in ann_file:
        return  # no file, or a remote one (backend_args)
    path = ann_file if osp.isabs(ann_file) else osp.join(
        dataset_cfg.get('data_root') or '', ann_file)
    if not osp.exists(path):
        where = ('' if osp.isabs(path) else
                 f' (relative to the current folder {os.getcwd()}: run from '
                 f"the folder the config's paths are relative to, the "
                 f"project root for mmext's configs)")
        if path.startswith('../shared/data/'):  # the configs' default
            where += "; or set MMEXT_DATA_ROOT to mmext's small datasets"
        raise FileNotFoundError(f'ann_file {path} does not exist{where}.')
    # A list of blank lines is empty too; a large file is not (COCO json).
    if osp.isfile(path) and osp.getsize(path) < 4096:
        with open(path, 'rb') as f:
            if not f.read().strip():
                raise ValueError(f'ann_file {path} lists no samples.')


def single_class_subset(dataset_cfg: dict, dataset) -> Optional[str]:
    """The warning for an ``indices`` subset that holds one class.

    ``indices=N`` keeps the first N entries: one class in a list sorted by
    class, as mmaction2's annotation lists often are.

    Args:
        dataset_cfg (dict): The loader's ``dataset`` config.
        dataset (Dataset): The built dataset.

    Returns:
        str, optional: The message; None unless ``indices`` is set and every
        sample's ``label`` (mmaction2's data info) is the same.
    """
    if dataset_cfg.get('indices') is None or len(dataset) < 2 or not hasattr(
            dataset, 'get_data_info'):
        return None
    labels = {dataset.get_data_info(i).get('label')
              for i in range(len(dataset))}
    if len(labels) != 1 or not isinstance(next(iter(labels)), int):
        return None
    return (f'indices={dataset_cfg["indices"]!r} keeps {len(dataset)} '
            f'samples of one class (label {labels.pop()}): the list is '
            f'sorted by class. Give indices spread over it, e.g. '
            f'indices=[0, 10, 20, ...].')


def restart_hint(filename: str) -> str:
    """The alternative every refused resume offers: start from the weights."""
    return (f'or start from its weights with load_from={filename} (no '
            f'--resume).')


@RUNNERS.register_module(name='Runner')
class Runner(MMEngineRunner):
    """mmengine's ``Runner`` with the effective batch and the checks that
    need a runner subclass (docs/en/get_started.md, "Tool options").

    * ``auto_scale_lr`` scales by the effective batch, loader batch x world
      size x ``accumulative_counts`` (logged, and saved in checkpoints as
      ``meta[EFFECTIVE_BATCH_KEY]``).
    * ``auto_scale_schedule`` rescales iteration counts
      (:meth:`scale_schedule`).
    * Warnings: param scheduler values the run cannot honour (unless a hook
      has ``remaps_param_schedulers = True``), resumed iteration-based
      schedulers of another effective batch, dataset mistakes, frozen
      layers that load no weights.
    * ``resume`` runs the guards of :func:`register_resume_guard`; its own
      checkpoint loads are trusted
      (:func:`mmext.compat.trusted_checkpoint_loading`).
    """

    def train(self):
        """mmengine's, warning first about frozen layers without weights."""
        loaded = [''] if self._load_from or self._resume else []
        for message in frozen_without_weights(self.model,
                                              self.cfg.get('model'), loaded):
            warn(message)
        return super().train()

    @staticmethod
    def build_dataloader(dataloader, seed: Optional[int] = None,
                         diff_rank_seed: bool = False):
        """mmengine's, naming dataset mistakes first; arguments as there."""
        if isinstance(dataloader, dict):
            check_dataset_config(dataloader.get('dataset') or {})
        loader = MMEngineRunner.build_dataloader(dataloader, seed,
                                                 diff_rank_seed)
        if isinstance(dataloader, dict):
            message = single_class_subset(dataloader.get('dataset') or {},
                                          loader.dataset)
            if message:
                warn(message)
        return loader

    def scale_lr(self, optim_wrapper: OptimWrapper,
                 auto_scale_lr: Optional[dict] = None) -> None:
        """Log the effective batch; scale LRs by it if ``auto_scale_lr``.

        Args:
            optim_wrapper (OptimWrapper | OptimWrapperDict): Built wrapper(s).
            auto_scale_lr (dict, optional): ``enable`` and
                ``base_batch_size``, as in mmengine.

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
            counts = accumulative_counts(wrapper)
            batches[name] = batch = loader_batch * self.world_size * counts
            message = (f"{name + ': ' if name else ''}effective batch " +
                       effective_batch(loader_batch, self.world_size, counts))
            if enabled:
                ratio = batch / auto_scale_lr['base_batch_size']
                for group in wrapper.optimizer.param_groups:
                    group['lr'] = group['lr'] * ratio
                message += (f'; auto_scale_lr: LR x {ratio:g} (effective '
                            f'batch / base_batch_size '
                            f"{auto_scale_lr['base_batch_size']})")
            self.logger.info(message)
        # Not resumed: a later run with mmengine's Runner must not inherit it.
        self.message_hub.update_info(EFFECTIVE_BATCH_INFO, batches,
                                     resumed=False)
        self.scale_schedule(optim_wrapper)

    # Set by scale_schedule: the ratio iteration counts are divided by, and
    # the images per runner iteration of the recipe and of the run.
    _schedule_ratio: Optional[float] = None
    _schedule_images: Tuple[float, int] = (1.0, 1)

    def scale_schedule(self, optim_wrapper) -> None:
        """Divide the recipe's iteration counts by the batch ratio.

        With ``auto_scale_schedule.enable``: the iteration loop's counts,
        iteration-based ``CheckpointHook`` intervals, ``by_epoch=False``
        param schedulers (in :meth:`build_param_scheduler`) and what a
        wrapper's ``rescale_iterations`` counts; epoch counts stay. Keys:
        ``base_batch_size`` (default ``auto_scale_lr.base_batch_size``) and
        ``base_accumulative_counts`` (default 1: recipes are written without
        accumulation); see
        :func:`mmext.scheduler_checks.schedule_ratio`.

        Raises:
            ValueError: Without a base batch size, or with a hook that
                remaps the param schedulers.
        """
        cfg = self.cfg.get('auto_scale_schedule') or {}
        if not cfg.get('enable', False):
            return
        base = cfg.get('base_batch_size',
                       (self.auto_scale_lr or {}).get('base_batch_size'))
        if base is None:
            raise ValueError('auto_scale_schedule.enable=True needs '
                             'auto_scale_schedule.base_batch_size (or '
                             'auto_scale_lr.base_batch_size): the effective '
                             "batch the recipe's iteration counts are for")
        if any(getattr(h, 'remaps_param_schedulers', False)
               for h in self.hooks):
            raise ValueError('auto_scale_schedule cannot rescale a schedule '
                             'that a hook (MultigridHook) rebuilds on its own '
                             'axis; remove one of them')
        base_k = cfg.get('base_accumulative_counts', 1)
        images = train_loader_batch_size(self) * self.world_size
        ratio = schedule_ratio(train_loader_batch_size(self),
                               self.world_size, base, base_k)
        self._schedule_ratio = ratio
        self._schedule_images = (base / base_k, images)
        changes = self._rescale_loop_and_hooks(ratio)
        for wrapper in optim_wrappers(optim_wrapper).values():
            rescale = getattr(wrapper, 'rescale_iterations', None)
            if callable(rescale):
                changes += rescale(lambda v: rescale_iterations(v, ratio))
        self.logger.info(
            f'auto_scale_schedule: iteration counts / {ratio:g} ({images} '
            f"images per runner iteration; the recipe's: base_batch_size "
            f'{base} / base_accumulative_counts {base_k}): ' +
            ('; '.join(changes) or 'nothing in the loop, hooks or wrapper') +
            '; param schedulers when built')

    def _rescale_loop_and_hooks(self, ratio: float) -> List[str]:
        """The loop's and the checkpoint hooks' iteration counts / ratio."""
        changes = []
        loop = self.train_loop
        if isinstance(loop, IterBasedTrainLoop):
            max_iters = rescale_iterations(loop.max_iters, ratio)
            changes.append(f'train_cfg.max_iters {loop.max_iters} -> '
                           f'{max_iters}')
            set_train_loop_length(loop, loop.max_epochs, max_iters)
            old = list(loop.dynamic_intervals)
            loop.dynamic_intervals = [
                rescale_iterations(v, ratio) for v in old]
            loop.dynamic_milestones = [
                rescale_iterations(v, ratio, 0)
                for v in loop.dynamic_milestones]
            loop.val_interval = loop.dynamic_intervals[0]
            changes.append(f'train_cfg.val_interval {old} -> '
                           f'{loop.dynamic_intervals}')
            begin = rescale_iterations(loop.val_begin, ratio)
            if begin != loop.val_begin:
                changes.append(f'train_cfg.val_begin {loop.val_begin} -> '
                               f'{begin}')
                loop.val_begin = begin
        for hook in self.hooks:
            if isinstance(hook, CheckpointHook) and not hook.by_epoch:
                interval = rescale_iterations(hook.interval, ratio)
                changes.append(f'CheckpointHook.interval {hook.interval} -> '
                               f'{interval}')
                hook.interval = interval
        return changes

    def build_param_scheduler(self, scheduler):
        """mmengine's, rescaled and checked first; arguments as there."""
        if self._schedule_ratio is not None:
            scaled, changes = rescale_schedulers(scheduler,
                                                 self._schedule_ratio)
            if changes:
                self.logger.info('auto_scale_schedule: param_scheduler ' +
                                 '; '.join(changes))
            for line in warmup_images(scheduler, scaled,
                                      *self._schedule_images):
                self.logger.info(f'auto_scale_schedule: {line}')
            scheduler = scaled
        loop = self.train_loop
        remapped = any(getattr(h, 'remaps_param_schedulers', False)
                       for h in self.hooks)
        if loop is not None and scheduler_configs(scheduler) and not remapped:
            max_epochs = (loop.max_epochs
                          if isinstance(loop, EpochBasedTrainLoop) else None)
            for message in unused_scheduler_values(scheduler, max_epochs,
                                                   loop.max_iters):
                warn(message)
        return super().build_param_scheduler(scheduler)

    def save_checkpoint(self, *args, meta: Optional[dict] = None,
                        **kwargs) -> None:
        """mmengine's, adding ``meta[EFFECTIVE_BATCH_KEY]``."""
        batches = self.message_hub.get_info(EFFECTIVE_BATCH_INFO)
        if batches is not None:
            meta = dict(meta or {}, **{EFFECTIVE_BATCH_KEY: dict(batches)})
        super().save_checkpoint(*args, meta=meta, **kwargs)

    # While ``resume`` runs: whether it restores the optimizer.
    _resuming: Optional[bool] = None

    def resume(self, filename: str, resume_optimizer: bool = True,
               *args, **kwargs) -> None:
        """mmengine's, with :meth:`check_resume`; arguments as there."""
        self._resuming = resume_optimizer
        try:
            super().resume(filename, resume_optimizer, *args, **kwargs)
        finally:
            self._resuming = None

    def load_checkpoint(self, filename: str, *args, **kwargs) -> dict:
        """mmengine's, trusted; when resuming, :meth:`check_resume` first."""
        with trusted_checkpoint_loading():
            checkpoint = super().load_checkpoint(filename, *args, **kwargs)
        if self._resuming is not None:
            self.check_resume(checkpoint, filename, self._resuming)
            # Set anew by this run; mmengine would warn about loading it.
            checkpoint.get('message_hub', {}).get('resumed_keys', {}).pop(
                EFFECTIVE_BATCH_INFO, None)
        return checkpoint

    def check_resume(self, checkpoint: dict, filename: str,
                     resume_optimizer: bool = True) -> None:
        """Run every resume guard (those of modules the registries list too)
        and warn about schedulers of another effective batch.

        Args:
            checkpoint (dict): The loaded checkpoint.
            filename (str): Its path, for the message.
            resume_optimizer (bool): Whether the optimizer state is restored.

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
            warn(message)
