"""``MultigridHook``: runner glue; the plan is :class:`MultigridPlan`."""
import copy
import itertools
import logging
import time
from typing import Callable, List, Optional

import torch
from mmengine.dist import all_reduce
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper
from mmengine.optim import BaseOptimWrapper
from mmengine.registry import DATA_SAMPLERS
from mmengine.runner import EpochBasedTrainLoop, Runner

from mmext.compat import reset_to_initial_values, set_train_loop_length
from mmext.lr_scaling import check_auto_scale_lr, scale_lrs
from mmext.registry import HOOKS
from mmext.runner import (reads_bn_statistics_after_epoch,
                          register_resume_guard, restart_hint)
from .allocator import keep_freed_memory_for
from .amp import autocasts_to_bf16, float32_head_outputs
from .bn import disable_sub_bn, enable_sub_bn, update_precise_bn
from .compiled import CompiledRun, compile_enabled
from .data import MultigridDataset, ShortCycleBatchSampler
from .model_checks import check_run
from .monitor import DataWaitWatch
from .options import MultigridOptions
from .pipeline import resize_pipeline
from .plan import MultigridPlan
from .report import describe
from .resume import CHECKPOINT_KEY, check_resume, resume_signature
from .schedule import MultigridStage
from .transformers import remove_shape_adapters, shape_adapters

__all__ = [
    'MultigridHook', 'SCALAR_BATCH_SIZE', 'SCALAR_CLIP_LEN',
    'SCALAR_CROP_SIZE', 'SCALAR_PRECISE_BN'
]

# Scalars the hook writes to the visualizer backends (scalars.json,
# TensorBoard) at the iteration they happen: the long-cycle shape (per
# process) whenever the train loader changes, the batches of each precise
# BN pass.
SCALAR_BATCH_SIZE = 'multigrid/batch_size'
SCALAR_CLIP_LEN = 'multigrid/clip_len'
SCALAR_CROP_SIZE = 'multigrid/crop_size'
SCALAR_PRECISE_BN = 'multigrid/precise_bn_batches'

# Seeds of rebuilt loaders differ per stage so augmentations are not replayed.
_STAGE_SEED_STRIDE = 1009


def _unwrap(model):
    return model.module if is_model_wrapper(model) else model


def _check_repeat_collate(loader_cfg, repeats: int) -> None:
    """A ``RepeatAugDataset`` item is a list of clips, which only mmaction2's
    ``repeat_pseudo_collate`` flattens into the batch.

    Raises:
        ValueError: For another ``train_dataloader.collate_fn``, naming the
            one to set.
    """
    # As Runner.build_dataloader: a dict (type: a name or a function), or
    # the function itself.
    collate = loader_cfg.get('collate_fn', dict(type='pseudo_collate'))
    kind = collate.get('type') if isinstance(collate, dict) else collate
    name = getattr(kind, '__name__', str(kind)).rsplit('.', 1)[-1]
    if name != 'repeat_pseudo_collate':
        raise ValueError(
            f'train_dataloader.dataset is a RepeatAugDataset ({repeats} clips '
            f'per video), whose items are lists of clips that collate_fn '
            f'{name!r} cannot batch. Set train_dataloader.collate_fn = '
            f"dict(type='repeat_pseudo_collate').")


def _synchronize(outputs) -> None:
    """Wait for the device of the step's loss, so its time ends here.

    mmengine's ``RuntimeInfoHook`` reads the losses (a device sync) right
    after this hook, so syncing here costs nothing extra.
    """
    for value in (outputs or {}).values():
        if isinstance(value, torch.Tensor) and value.device.type == 'cuda':
            torch.cuda.synchronize(value.device)
            return


@HOOKS.register_module()
class MultigridHook(Hook):
    """Multigrid training (Wu et al., CVPR 2020) for an mmaction2 recipe.

    Add it to ``custom_hooks`` of an epoch-based recipe. Base ``T``, ``S``
    and ``B`` come from the train pipeline's ``SampleFrames``, its final
    fixed-size crop and ``train_dataloader.batch_size``; the LR stages from
    the ``MultiStepLR`` of ``param_scheduler``. Before training the hook
    turns them into the multigrid stages
    (:func:`mmext.multigrid.build_multigrid_schedule`), sets the loop's
    ``max_epochs``/``max_iters`` and rebuilds the param schedulers on the new
    epoch axis. At each shape change (only then) it rebuilds the train loader
    from the same dataset object; it multiplies the LR by the long-cycle batch
    factor during each iteration, runs sub-batch BN for per-device batches
    above ``bn_base_size`` (``bn_base_size`` clips per split at every
    iteration; BN layers the recipe trains: ``BatchNorm3d``, ``SyncBN`` and
    its reverted form; see :mod:`mmext.multigrid.bn`), precise BN of those
    layers at the end of each long-cycle shape that evaluation or a
    checkpoint follows, and writes checkpoints with the recipe's BN keys.
    The stage is derived from ``runner.epoch``, so resuming is exact.

    Args:
        long_cycle (bool): Cycle through ``long_cycle_factors``.
        short_cycle (bool): Cycle crop sizes iteration by iteration.
        epoch_factor (float): Total epochs = recipe ``max_epochs`` times this.
        long_cycle_factors (Sequence[tuple]): ``(t, s)`` factors of the base
            clip length and crop size, last ``(1, 1)``.
        short_cycle_factors (Sequence[float]): Crop factors of the short
            cycle.
        short_cycle_mode (str): ``'absolute'`` (factors of the base ``S``,
            PySlowFast) or ``'relative'`` (of the current ``S``, the paper).
        bn_base_size (int, optional): Clips per BN split; ``None`` or 0
            disables sub-batch BN.
        precise_bn_iters (int): Batches for precise BN at the end of a
            long-cycle shape (on that shape) when the statistics are read
            next: the last epoch, or one after which the loop validates or
            the epoch-based ``CheckpointHook`` saves
            (:func:`mmext.runner.reads_bn_statistics_after_epoch`);
            elsewhere the next shape's training would overwrite them
            unread. 0 disables it. Only BN layers in training mode are
            updated; frozen ones keep their statistics.
        lr_steps (Sequence[int], optional): LR stage starts in recipe epochs
            (``[0, ...]``); default from the recipe's ``MultiStepLR``, else
            ``[0, max_epochs]``.
        skip_broken_clips (bool): Replace a training clip that fails to load
            (truncated/corrupt file) by a random other clip, with a warning
            naming the file and a count per epoch in the log. False (default)
            stops training with an error naming the file and dataset index.
        data_wait_threshold (float, optional): After each shape change the
            hook logs the stage-change cost (loader rebuild, worker start,
            first batch) and the share of iteration time spent waiting for
            data over the next ``data_wait_iters`` iterations; above this
            share it logs one warning per run that the run is data-bound
            (see :mod:`mmext.multigrid.monitor`). 0 or None: no warning.
        data_wait_iters (int): Iterations measured after each shape change.
        keep_cpu_memory (bool): When the model trains on the CPU and the C
            library is glibc, make the process keep freed memory for reuse
            (:mod:`mmext.multigrid.allocator`; logged once); the short
            cycle's changing sizes otherwise map and unmap the activations
            at every iteration. No effect on CUDA runs. False leaves malloc
            alone.

    Raises:
        ValueError: At construction for a negative ``bn_base_size`` or
            ``precise_bn_iters``, or a non-bool ``skip_broken_clips``.
        TypeError: In ``before_run`` if the train loop is not epoch based.
        ValueError: In ``before_run`` for out-of-range factors or
            ``epoch_factor`` (see :func:`build_multigrid_schedule`), a train
            dataset without its own pipeline (dataset wrappers), a
            ``RepeatAugDataset`` without ``repeat_pseudo_collate``, a pipeline
            without ``SampleFrames`` or final fixed-size crop, a clip length
            the backbone cannot take, a batch sub-batch BN cannot split, a
            BN layer of a kind it cannot split (e.g. ``BatchNorm1d``), or a
            dataset too small for one batch of some stage.
        BrokenClipError: During training, for a clip that fails to load,
            naming its file and index (unless ``skip_broken_clips``).
    """

    priority = 'HIGHEST'  # before RuntimeInfoHook logs the LR and before
    # DistSamplerSeedHook calls set_epoch on the loader's sampler.

    # mmext.Runner leaves the scheduler checks to the hook, which moves the
    # schedulers onto the multigrid axis and checks them there.
    remaps_param_schedulers = True

    def __init__(self, **options):
        self.options = MultigridOptions.from_dict(options)
        self.plan: Optional[MultigridPlan] = None
        self._loaded_schedule: Optional[dict] = None
        self.watch = DataWaitWatch(self.options.data_wait_threshold,
                                   self.options.data_wait_iters)
        self._last_iter_end: Optional[float] = None
        self._epoch_start = self._iter_start = 0.0
        self._data_seconds = 0.0
        self._loader_stage: Optional[MultigridStage] = None
        self._restore_lrs: Optional[Callable[[], None]] = None
        self._compiled: Optional[CompiledRun] = None
        # Whether before_run made glibc keep freed memory (keep_cpu_memory).
        self.kept_freed_memory = False

    # ------------------------------------------------------------ set-up
    def before_run(self, runner) -> None:
        """Check the recipe, plan the run and re-time the loop.

        Only for training: ``tools/test.py`` with a multigrid config runs the
        recipe unchanged (its train loop and optimizer are never built).
        """
        if not isinstance(runner.optim_wrapper, BaseOptimWrapper):
            return
        check_auto_scale_lr(runner.auto_scale_lr, runner.optim_wrapper,
                            runner.message_hub)
        loop = runner.train_loop
        if not isinstance(loop, EpochBasedTrainLoop):
            raise TypeError(
                f'MultigridHook needs an epoch-based train loop, got '
                f'{type(loop).__name__}. Use train_cfg = dict('
                f'type="EpochBasedTrainLoop", max_epochs=...).')
        self.plan = MultigridPlan.for_runner(runner, self.options)
        self._pipeline = list(runner.cfg.train_dataloader.dataset.pipeline)
        self._dataset = loop.dataloader.dataset
        model = _unwrap(runner.model)
        check_run(self.plan, model, self._pipeline)
        for line in shape_adapters(model):
            print_log(f'Multigrid: shape adapter: {line}', logger='current')
        repeats = self.plan.clips_per_sample
        if repeats > 1:
            _check_repeat_collate(runner.cfg.train_dataloader, repeats)
            print_log(f'Multigrid: RepeatAugDataset: each video decoded '
                      f'once gives {repeats} clips at the shape of its '
                      f'iteration; batches hold {repeats}x the clips of the '
                      f'plan\'s batch sizes (which count videos)',
                      logger='current')
        if self.options.keep_cpu_memory:
            message = keep_freed_memory_for(model)
            self.kept_freed_memory = message is not None
            if message:
                print_log(f'Multigrid: {message}', logger='current')
        if autocasts_to_bf16(runner.optim_wrapper) and float32_head_outputs(
                model):
            print_log('Multigrid: bfloat16 autocast: cls_head outputs in '
                      'float32 (mmaction2 computes its top-k accuracy in '
                      'numpy, which has no bfloat16)', logger='current')
        if max(self.plan.sub_bn_splits(s) for s in self.plan.stages) > 1:
            # Once, before mmengine compiles the model: the layers split
            # every batch at forward time.
            enable_sub_bn(model, self.options.bn_base_size)
        if compile_enabled(runner.cfg.get('compile')):
            # Before Runner.train compiles train_step (after before_run).
            self._compiled = CompiledRun(self.plan)
            print_log('Multigrid: ' + self._compiled.start(
                model, runner.message_hub, runner.optim_wrapper),
                logger='current')
        set_train_loop_length(loop, self.plan.max_epochs, self.plan.max_iters)
        if self.plan.param_scheduler:
            self._rebuild_schedulers(runner)
        print_log('Multigrid plan:\n' + describe(self.plan),
                  logger='current')

    def _rebuild_schedulers(self, runner) -> None:
        """Replace the runner's schedulers by ones on the multigrid axis."""
        # The first build already applied e.g. LinearLR's start factor.
        reset_to_initial_values(self._param_groups(runner))
        runner.param_schedulers = runner.build_param_scheduler(
            self.plan.scheduler_cfgs())

    @staticmethod
    def _param_groups(runner) -> List[dict]:
        """Param groups of the optimizer(s), without the wrapper's extras."""
        wrapper = runner.optim_wrapper
        wrappers = list(getattr(wrapper, 'optim_wrappers', {}).values())
        return [
            g for w in wrappers or [wrapper] for g in w.optimizer.param_groups
        ]

    # ------------------------------------------------------------ epochs
    def before_train_epoch(self, runner) -> None:
        """Swap in the loader of the epoch's stage."""
        start = time.perf_counter()
        self._last_iter_end = None
        stage = self.plan.stage_at(runner.epoch)
        if self._loader_stage is not None and (
                self._loader_stage.short_cycle == stage.short_cycle):
            self._epoch_start = time.perf_counter()
            return
        runner.train_loop.dataloader = self.build_loader(runner, stage)
        self._loader_stage = stage
        sizes = self.plan.batch_sizes(stage)
        runner.visualizer.add_scalars(
            {SCALAR_BATCH_SIZE: sizes[-1],
             SCALAR_CLIP_LEN: stage.shape.clip_len,
             SCALAR_CROP_SIZE: stage.shape.crop_size}, step=runner.iter)
        print_log(
            f'Multigrid: epoch {runner.epoch}: batches {sizes} per process '
            f'(effective {[b * self.plan.batch_multiplier for b in sizes]}), '
            f'T={stage.shape.clip_len}, crops '
            f'{[s.crop_size for s in stage.short_cycle]}, '
            f'{len(runner.train_loop.dataloader)} iters/epoch',
            logger='current')
        self._epoch_start = time.perf_counter()
        self.watch.start_stage(
            f'epoch {runner.epoch} (batches {self.plan.batch_sizes(stage)}, '
            f'T={stage.shape.clip_len}, S={stage.shape.crop_size})',
            rebuild_seconds=self._epoch_start - start)

    def build_loader(self, runner, stage: MultigridStage,
                     short_cycle: bool = True):
        """Train loader of ``stage`` reusing the recipe's dataset object.

        Args:
            runner (Runner): The runner.
            stage (MultigridStage): Stage whose shapes to serve.
            short_cycle (bool): False gives only the long-cycle shape (for
                precise BN).

        Returns:
            DataLoader: Built by ``Runner.build_dataloader``.
        """
        shapes = stage.short_cycle if short_cycle else stage.short_cycle[-1:]
        dataset = MultigridDataset(
            self._dataset, [
                resize_pipeline(self._pipeline, s.clip_len, s.crop_size)
                for s in shapes
            ],
            skip_broken_clips=self.options.skip_broken_clips)
        cfg = copy.deepcopy(runner.cfg.train_dataloader)
        for key in ('batch_size', 'batch_sampler', 'shuffle', 'drop_last'):
            cfg.pop(key, None)
        seed = runner.seed + _STAGE_SEED_STRIDE * self.plan.stages.index(stage)
        sampler = DATA_SAMPLERS.build(
            cfg.pop('sampler'), default_args=dict(dataset=dataset,
                                                  seed=runner.seed))
        cfg.update(
            dataset=dataset,
            sampler=sampler,
            batch_sampler=ShortCycleBatchSampler(
                sampler, self.plan.batch_sizes(stage, short_cycle)))
        return Runner.build_dataloader(cfg, seed=seed)

    def after_train_epoch(self, runner) -> None:
        """Count skipped clips; precise BN at the end of a shape whose
        statistics are read (see the class docstring)."""
        self._report_skipped(runner)
        iters = self.options.precise_bn_iters
        if not iters or not self.plan.is_shape_end(runner.epoch):
            return
        if not reads_bn_statistics_after_epoch(runner):
            # The next shape's training overwrites the statistics before
            # anything reads them (PySlowFast likewise runs precise BN only
            # on evaluation and checkpoint epochs).
            return
        stage = self.plan.stage_at(runner.epoch)
        model = _unwrap(runner.model)
        loader = self.build_loader(runner, stage, short_cycle=False)
        loader.batch_sampler.sampler.set_epoch(runner.epoch)

        def forward(batch):
            data = model.data_preprocessor(batch, True)
            model(**data, mode='tensor')

        start = time.perf_counter()
        n = update_precise_bn(
            model, itertools.islice(loader, iters), forward)
        print_log(f'Multigrid: precise BN over {n} batches at epoch '
                  f'{runner.epoch} ({time.perf_counter() - start:.1f} s)',
                  logger='current')
        runner.visualizer.add_scalars({SCALAR_PRECISE_BN: n},
                                      step=runner.iter)

    def _report_skipped(self, runner) -> None:
        """Log the broken clips the epoch skipped (summed over ranks)."""
        if not self.options.skip_broken_clips:
            return
        dataset = runner.train_loop.dataloader.dataset
        count = torch.tensor(dataset.skipped_clips)
        all_reduce(count)
        dataset.reset_skipped()
        if count.item():
            print_log(f'Multigrid: epoch {runner.epoch} skipped '
                      f'{count.item()} broken clips (skip_broken_clips=True; '
                      f'the warnings name the files)',
                      logger='current', level=logging.WARNING)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        """Record the schedule (the BN keys are the recipe's already)."""
        checkpoint.setdefault('meta', {})[CHECKPOINT_KEY] = (
            resume_signature(self.plan))

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        """Remember which multigrid schedule (if any) the checkpoint ran."""
        self._loaded_schedule = checkpoint.get('meta', {}).get(CHECKPOINT_KEY)

    def before_train(self, runner) -> None:
        """A resumed run must continue the checkpoint's schedule."""
        if runner.iter > 0:
            check_resume(self.plan, self._loaded_schedule, runner.epoch,
                         runner.iter)

    def after_train(self, runner) -> None:
        """Leave the recipe's plain BN modules (and no shape adapters) in
        the trained model; log the graphs ``compile=...`` made."""
        disable_sub_bn(_unwrap(runner.model))
        remove_shape_adapters(_unwrap(runner.model))
        if self._compiled is not None:
            message = self._compiled.stop()
            print_log('Multigrid: ' + message, logger='current',
                      level=logging.WARNING if self._compiled.fallbacks
                      else logging.INFO)

    # ------------------------------------------------------------ iterations
    def before_train_iter(self, runner, batch_idx: int,
                          data_batch=None) -> None:
        """Scale the LR by the long-cycle batch factor for this iteration."""
        self._iter_start = time.perf_counter()
        self._data_seconds = self._iter_start - (self._last_iter_end
                                                 or self._epoch_start)
        factor = self.plan.stage_at(runner.epoch).shape.batch_factor
        groups = self._param_groups(runner)
        self._restore_lrs = scale_lrs(groups, [factor] * len(groups))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None) -> None:
        """Restore the schedulers' LR; watch the data wait."""
        if self._restore_lrs is not None:
            self._restore_lrs()
            self._restore_lrs = None
        _synchronize(outputs)
        self._last_iter_end = time.perf_counter()
        for level, message in self.watch.record(
                self._data_seconds, self._last_iter_end - self._iter_start):
            print_log(message, logger='current', level=level)



@register_resume_guard
def _multigrid_checkpoint_needs_the_hook(runner, checkpoint: dict,
                                         filename: str,
                                         resume_optimizer: bool) -> None:
    """Refuse to resume a multigrid checkpoint without ``MultigridHook``.

    Raises:
        ValueError: Naming the hook to add, or to start from the weights.
    """
    schedule = checkpoint.get('meta', {}).get(CHECKPOINT_KEY)
    if schedule is not None and not any(
            isinstance(hook, MultigridHook) for hook in runner.hooks):
        raise ValueError(
            f'{filename} comes from a multigrid run: its epochs (of '
            f"{schedule['max_epochs']}) and param scheduler states are on "
            f"the multigrid schedule, not on the recipe's. Resume with that "
            f"run's mmext.MultigridHook in custom_hooks, " +
            restart_hint(filename))
