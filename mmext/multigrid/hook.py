"""``MultigridHook``: the runner glue of multigrid training.

Every safeguard holds with mmengine's own ``Runner``; only refusing a
multigrid checkpoint resumed without the hook needs ``mmext.Runner``
(:func:`mmext.runner.register_resume_guard`)."""
import copy
import itertools
import logging
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from mmengine.dataset import Compose
from mmengine.dist import all_reduce
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.optim import BaseOptimWrapper
from mmengine.registry import DATA_SAMPLERS
from mmengine.runner import Runner

from mmext.compat import (checkpoint_saves, epoch_checkpoint_hooks,
                          loop_validates, reset_to_initial_values,
                          save_checkpoint_after, set_train_loop_length,
                          set_validation_epochs, unwrap_model)
from mmext.log import logs_refusals, warn
from mmext.lr_scaling import check_auto_scale_lr, optim_wrappers, scale_lrs
from mmext.options import check_option, is_int, is_number, type_name
from mmext.registry import HOOKS
from mmext.runner import register_resume_guard, restart_hint
from .bn import (bn_layers_in_training, disable_sub_bn, enable_sub_bn,
                 update_precise_bn)
from .checks import check_run
from .compile import CompiledRun, compile_enabled, run_outside_dynamo
from .data import (MultigridDataset, ShortCycleBatchSampler, clips_per_sample,
                   name_broken_clips, resize_pipeline)
from .memory import glibc_version, keep_freed_memory
from .plan import MultigridOptions, MultigridPlan
from .report import DataWaitWatch, describe
from .resume import CHECKPOINT_KEY, check_resume, resume_signature
from .schedule import (DEFAULT_LONG_CYCLE_FACTORS, DEFAULT_SHORT_CYCLE_FACTORS,
                       MultigridStage)
from .transformers import install_shape_adapters, remove_shape_adapters

__all__ = [
    'MultigridHook', 'SCALAR_BATCH_SIZE', 'SCALAR_CLIP_LEN',
    'SCALAR_CROP_SIZE', 'SCALAR_PRECISE_BN', 'reads_bn_statistics_after_epoch',
    'prepare_run', 'cudnn_autotuner'
]

# Visualizer scalars: the per-process long-cycle shape at each loader
# change, the batches of each precise BN pass.
SCALAR_BATCH_SIZE = 'multigrid/batch_size'
SCALAR_CLIP_LEN = 'multigrid/clip_len'
SCALAR_CROP_SIZE = 'multigrid/crop_size'
SCALAR_PRECISE_BN = 'multigrid/precise_bn_batches'
# Seeds of rebuilt loaders differ per stage so augmentations are not replayed.
_STAGE_SEED_STRIDE = 1009


def _log(message: str, level: int = logging.INFO) -> None:
    print_log('Multigrid: ' + message, logger='current', level=level)


def cudnn_autotuner(cfg) -> Tuple[bool, str]:
    """Whether a CUDA run autotunes cuDNN for its few shapes, and why.

    Yes unless the config file names ``env_cfg.cudnn_benchmark`` (mmaction2's
    bases set False for every recipe) or ``randomness.deterministic``.

    Args:
        cfg (Config): The run's config.

    Returns:
        tuple[bool, str]: Whether to set ``torch.backends.cudnn.benchmark``,
        and the reason logged with it.
    """
    if cfg.get('env_cfg', {}).get('cudnn_benchmark'):
        return True, 'env_cfg.cudnn_benchmark=True'
    if cfg.get('randomness', {}).get('deterministic'):
        return False, 'randomness.deterministic=True'
    try:
        with open(cfg.filename) as f:
            if 'cudnn_benchmark' in f.read():
                return False, f'env_cfg.cudnn_benchmark in {cfg.filename}'
    except (AttributeError, OSError, TypeError):  # a config built in code
        pass
    return True, ('for the grid shapes; env_cfg = dict(cudnn_benchmark='
                  'False) in the config keeps it off')


def prepare_run(runner, keep_cpu_memory: bool = True) -> Callable[[], None]:
    """Set up what ``MultigridHook`` gives a run besides multigrid (logged).

    cuDNN's autotuner on CUDA (:func:`cudnn_autotuner`), glibc keeping freed
    memory when the model trains on the CPU, and
    :func:`~mmext.multigrid.compile.run_outside_dynamo` under mmengine's
    ``compile``. The speed-up tool gives its baseline the same.

    Args:
        runner (Runner): The run's runner, its model and optimizer built.
        keep_cpu_memory (bool): Whether glibc may keep freed memory
            (:func:`~mmext.multigrid.memory.keep_freed_memory`). Defaults to
            True.

    Returns:
        Callable[[], None]: Undoes the dynamo exclusions (the allocator
        setting is process-wide and stays).
    """
    model = unwrap_model(runner.model)
    param = next(model.parameters(), None)
    if param is not None and param.device.type == 'cuda':
        on, why = cudnn_autotuner(runner.cfg)
        torch.backends.cudnn.benchmark = on
        print_log(f'cuDNN autotuner {"on" if on else "off"}: {why}',
                  logger='current')
    if (keep_cpu_memory and param is not None and param.device.type == 'cpu'
            and keep_freed_memory()):
        print_log(f'glibc {glibc_version()} keeps freed memory for reuse '
                  f'(mallopt M_MMAP_MAX=0, M_TRIM_THRESHOLD=-1); '
                  f'keep_cpu_memory=False leaves malloc alone',
                  logger='current')
    if not compile_enabled(runner.cfg.get('compile')):
        return lambda: None
    print_log('torch.compile: the data preprocessor, the message hub and '
              'the optimizer step run outside dynamo', logger='current')
    return run_outside_dynamo(model, runner.message_hub,
                              runner.optim_wrapper)


def _check_repeat_collate(loader_cfg) -> None:
    """Raise unless the loader collates with ``repeat_pseudo_collate``."""
    collate = loader_cfg.get('collate_fn', dict(type='pseudo_collate'))
    name = type_name(collate.get('type') if isinstance(collate, dict)
                     else collate)
    if name != 'repeat_pseudo_collate':
        raise ValueError(f'A RepeatAugDataset needs collate_fn=dict(type='
                         f"'repeat_pseudo_collate'), got {name!r}.")


def reads_bn_statistics_after_epoch(runner) -> bool:
    """Whether what follows the current train epoch reads BN statistics.

    True in ``after_train_epoch`` of the last epoch, or when the loop
    validates or an epoch-based ``CheckpointHook`` saves next (as mmengine
    decides); iteration-based checkpoints are not predicted.

    Args:
        runner (Runner): The runner, in ``after_train_epoch``.

    Returns:
        bool: Whether the BN statistics are read before the next epoch trains.
    """
    done = runner.epoch + 1
    if done >= runner.train_loop.max_epochs:
        return True
    if runner.val_loop is not None and loop_validates(runner.train_loop,
                                                      done):
        return True
    return any(checkpoint_saves(hook, done)
               for hook in epoch_checkpoint_hooks(runner))


# ---------------------------------------------------------------- the hook
@HOOKS.register_module()
class MultigridHook(Hook):
    """Multigrid training (Wu et al., CVPR 2020) for an mmaction2 recipe.

    Add it to ``custom_hooks`` of an epoch-based recipe; base ``(B, T, S)``
    and LR stages come from the recipe. The stage follows ``runner.epoch``,
    so resuming is exact. The schedule options are checked by
    :class:`MultigridOptions`, the runtime ones here, when the hook is
    built. The options of a cycle that is off, and ``lr_rule`` under
    ``batch_policy='constant'``, do nothing: set, they warn
    (:meth:`MultigridOptions.unused_options`).

    Args:
        long_cycle (bool): Cycle through ``long_cycle_factors`` inside every
            LR stage. Defaults to True.
        short_cycle (bool): Cycle crop sizes iteration by iteration.
            Defaults to True.
        epoch_factor (float): Total epochs = recipe ``max_epochs`` x this.
            Defaults to 1.5.
        long_cycle_factors (Sequence[tuple]): ``(t, s)`` factors of the base
            clip length and crop size, each in (0, 1], coarse to fine, last
            ``(1, 1)``; batch factor ``round(1 / (t s^2))``. Defaults to
            ``((1/4, 1/sqrt2), (1/2, 1/sqrt2), (1/2, 1), (1, 1))``.
        short_cycle_factors (Sequence[float]): Crop factors of the two small
            short-cycle sizes; the third is the long-cycle S. Defaults to
            ``(1/2, 1/sqrt2)``.
        short_cycle_mode (str): ``'absolute'`` (factors of the base S,
            PySlowFast) or ``'relative'`` (of the current S, the paper's
            text). Defaults to ``'absolute'``.
        bn_base_size (int, optional): Clips per BN split: larger per-device
            batches are normalised in splits of this many clips; None or 0
            disables sub-batch BN. Defaults to 8.
        precise_bn_iters (int): Batches of precise BN, on the epoch's
            long-cycle shape, before each validation and checkpoint (and
            the end), at most one pass over the data (the loader's batches
            per epoch); 0 disables it. Defaults to 200.
        lr_steps (Sequence[int], optional): LR stage starts in recipe epochs
            (``[0, ...]``); None: the recipe's ``MultiStepLR`` milestones,
            else ``[0, max_epochs]``. Defaults to None.
        lr_rule (str): How the LR follows the long-cycle batch factor B/B0:
            ``'linear'`` (x B/B0, the paper's rule, for SGD) or ``'sqrt'``
            (x sqrt(B/B0), the usual rule for the Adam family). Defaults to
            ``'linear'``.
        batch_policy (str): The batch of a coarse shape, from the paper's
            factor ``F = T0 S0^2 / (T S^2)``: ``'paper'`` (``B0 F``: a step's
            FLOPs stay the base step's, fewer steps), ``'sqrt'``
            (``B0 round(sqrt F)``) or ``'constant'`` (``B0``: cheaper steps,
            the recipe's steps per epoch). The LR follows the batch trained.
            On a small dataset the long cycle alone at ``'paper'`` kept the
            most accuracy (MSR Action3D top-1 0.705; ``'constant'`` with
            both cycles 0.629: docs/en/multigrid.md, "Batch policy").
            Defaults to ``'paper'``.
        skip_broken_clips (bool): Replace a training clip that fails to load
            by a random other one (warned, counted per epoch); False stops
            with an error naming the file. Defaults to False.
        data_wait_threshold (float, optional): Share of the iteration time
            spent waiting for data, after a shape change, above which the
            hook warns once that the run is data-bound; 0 or None: figures
            only. Defaults to 0.2.
        data_wait_iters (int): Iterations measured after each shape change.
            Defaults to 10.
        keep_cpu_memory (bool): When the model trains on the CPU with glibc,
            make glibc keep freed memory for reuse. Defaults to True.

    Raises:
        ValueError: At construction for a bad option value; in
            ``before_run`` for a recipe the plan or the model checks refuse.
        TypeError: For an unknown option.
        BrokenClipError: During training, for a clip that fails to load
            (unless ``skip_broken_clips``).

    Examples:
        >>> # In an mmaction2 recipe's config: the paper's schedule
        >>> custom_hooks = [dict(type='mmext.MultigridHook')]
        >>> # A small dataset, AdamW: the long cycle alone, the paper's
        >>> # batches, the LR by the square root of the batch factor
        >>> custom_hooks = [dict(type='mmext.MultigridHook',
        ...                      short_cycle=False, lr_rule='sqrt')]
    """

    priority = 'HIGHEST'  # before RuntimeInfoHook logs the LR and before
    # DistSamplerSeedHook calls set_epoch on the loader's sampler.

    @logs_refusals
    def __init__(self,
                 long_cycle: bool = True,
                 short_cycle: bool = True,
                 epoch_factor: float = 1.5,
                 long_cycle_factors: Sequence[Tuple[float, float]] = (
                     DEFAULT_LONG_CYCLE_FACTORS),
                 short_cycle_factors: Sequence[float] = (
                     DEFAULT_SHORT_CYCLE_FACTORS),
                 short_cycle_mode: str = 'absolute',
                 bn_base_size: Optional[int] = 8,
                 precise_bn_iters: int = 200,
                 lr_steps: Optional[Sequence[int]] = None,
                 lr_rule: str = 'linear',
                 batch_policy: str = 'paper',
                 skip_broken_clips: bool = False,
                 data_wait_threshold: Optional[float] = 0.2,
                 data_wait_iters: int = 10,
                 keep_cpu_memory: bool = True):
        self.options = MultigridOptions(
            long_cycle=long_cycle, short_cycle=short_cycle,
            epoch_factor=epoch_factor, long_cycle_factors=long_cycle_factors,
            short_cycle_factors=short_cycle_factors,
            short_cycle_mode=short_cycle_mode, bn_base_size=bn_base_size,
            lr_steps=lr_steps, lr_rule=lr_rule, batch_policy=batch_policy)
        check_option(is_int(precise_bn_iters, 0),
                     'precise_bn_iters', precise_bn_iters, 'an int >= 0')
        for name, value in (('skip_broken_clips', skip_broken_clips),
                            ('keep_cpu_memory', keep_cpu_memory)):
            check_option(isinstance(value, bool), name, value, 'a bool')
        threshold = data_wait_threshold
        check_option(
            threshold is None or (is_number(threshold) and 0 <= threshold
                                  <= 1), 'data_wait_threshold', threshold,
            'None or a share in [0, 1]')
        check_option(is_int(data_wait_iters, 1),
                     'data_wait_iters', data_wait_iters, 'an int >= 1')
        self.precise_bn_iters = precise_bn_iters
        self.skip_broken_clips = skip_broken_clips
        self.keep_cpu_memory = keep_cpu_memory
        self.watch = DataWaitWatch(threshold, data_wait_iters)
        self.plan: Optional[MultigridPlan] = None
        self._loaded_schedule: Optional[dict] = None
        self._loader_stage: Optional[MultigridStage] = None
        self._restore_lrs: Optional[Callable[[], None]] = None
        self._undo_prepare: Callable[[], None] = lambda: None
        self._compiled: Optional[CompiledRun] = None
        self._checkpoint_epochs: Dict[CheckpointHook, List[int]] = {}

    # ------------------------------------------------------------ set-up
    @logs_refusals
    def before_run(self, runner) -> None:
        """Check the recipe, plan the run and re-time the loop.

        Training only: ``tools/test.py`` runs the recipe unchanged.

        Args:
            runner (Runner): The runner.

        Raises:
            ValueError: For more than one ``MultigridHook``, or what the plan
                and the model checks refuse (:meth:`MultigridPlan.from_config`,
                :func:`~mmext.multigrid.checks.check_run`).
        """
        if not isinstance(runner.optim_wrapper, BaseOptimWrapper):
            return
        count = sum(isinstance(h, MultigridHook) for h in runner.hooks)
        if count > 1:
            raise ValueError(f'{count} MultigridHooks in custom_hooks; keep '
                             f'one.')
        check_auto_scale_lr(runner.auto_scale_lr, runner.optim_wrapper,
                            runner.message_hub)
        loop = runner.train_loop
        loader = loop.dataloader
        self.plan = MultigridPlan.from_config(
            runner.cfg, len(loader.sampler), runner.world_size, len(loader),
            options=self.options,
            clips_per_sample=clips_per_sample(loader.dataset))
        self._pipeline = list(runner.cfg.train_dataloader.dataset.pipeline)
        self._dataset = loader.dataset
        val = runner.val_loop and runner.val_loop.dataloader.dataset
        if isinstance(getattr(val, 'pipeline', None), Compose):
            name_broken_clips(val.pipeline, '; fix or remove the file.')
        model = unwrap_model(runner.model)
        for line in install_shape_adapters(model):
            _log(f'shape adapter: {line}')
        self.plan.clip_flops = check_run(self.plan, model,
                                         self._pipeline).clip_flops
        if self.precise_bn_iters and not bn_layers_in_training(model):
            warn(f'precise_bn_iters={self.precise_bn_iters} has no effect: no '
                 f'BN layer trains (norm_eval=True?).')
        repeats = self.plan.clips_per_sample
        if repeats > 1:
            _check_repeat_collate(runner.cfg.train_dataloader)
            _log(f'RepeatAugDataset: {repeats} clips per video at the shape '
                 f'of its iteration; the batch sizes count videos')
        self._undo_prepare = prepare_run(runner, self.keep_cpu_memory)
        if self.plan.sub_bn_base_size:
            # Once, before mmengine compiles the model.
            enable_sub_bn(model, self.plan.sub_bn_base_size)
        if compile_enabled(runner.cfg.get('compile')):
            # Before Runner.train compiles train_step (after before_run).
            self._compiled = CompiledRun(self.plan)
            _log(self._compiled.start())
        set_train_loop_length(loop, self.plan.max_epochs, self.plan.max_iters)
        self._map_intervals(runner)
        if self.plan.param_scheduler:
            # The first build already applied e.g. LinearLR's start factor.
            reset_to_initial_values(self._param_groups(runner))
            runner.param_schedulers = runner.build_param_scheduler(
                self.plan.scheduler_cfgs())
        print_log('Multigrid plan:\n' + describe(self.plan), logger='current')

    def _map_intervals(self, runner) -> None:
        """Validation and epoch-based checkpoints after the multigrid epochs
        where the recipe's fall (its ``val_interval``, ``CheckpointHook``
        ``interval`` count recipe epochs, as its LR milestones)."""
        loop, plan = runner.train_loop, self.plan
        recipe = range(1, plan.recipe_epochs + 1)
        said = []
        if runner.val_loop is not None:
            epochs = plan.multigrid_epochs(
                r for r in recipe if loop_validates(loop, r) or (
                    r == plan.recipe_epochs and r >= loop.val_begin))
            set_validation_epochs(loop, epochs)
            said.append(f'validation after epochs {epochs}')
        self._checkpoint_epochs = {
            hook: plan.multigrid_epochs(
                r for r in recipe if checkpoint_saves(hook, r))
            for hook in epoch_checkpoint_hooks(runner)}
        saved = {e for hook, epochs in self._checkpoint_epochs.items()
                 for e in epochs + [plan.max_epochs] * hook.save_last}
        if saved:
            said.append(f'checkpoints after epochs {sorted(saved)}')
        if said:
            _log(f'{", ".join(said)} of {plan.max_epochs} (recipe epochs '
                 f'mapped as its LR milestones)')

    @staticmethod
    def _param_groups(runner) -> List[dict]:
        """Param groups of the optimizer(s), without the wrapper's extras."""
        return [g for w in optim_wrappers(runner.optim_wrapper).values()
                for g in w.optimizer.param_groups]

    # ------------------------------------------------------------ epochs
    def before_train_epoch(self, runner) -> None:
        """Swap in the loader of the epoch's stage if its shapes change.

        Args:
            runner (Runner): The runner.
        """
        start = time.perf_counter()
        stage = self.plan.stage_at(runner.epoch)
        if self._loader_stage is not None and (
                self._loader_stage.short_cycle == stage.short_cycle):
            return
        runner.train_loop.dataloader = self.build_loader(runner, stage)
        self._loader_stage = stage
        sizes = self.plan.batch_sizes(stage)
        runner.visualizer.add_scalars(
            {SCALAR_BATCH_SIZE: sizes[-1],
             SCALAR_CLIP_LEN: stage.shape.clip_len,
             SCALAR_CROP_SIZE: stage.shape.crop_size}, step=runner.iter)
        _log(f'epoch {runner.epoch}: batches {sizes} per process (effective '
             f'{[b * self.plan.batch_multiplier for b in sizes]}), '
             f'T={stage.shape.clip_len}, crops '
             f'{[s.crop_size for s in stage.short_cycle]}, '
             f'{len(runner.train_loop.dataloader)} iters/epoch')
        # The loader serves until the short cycle changes.
        end = next((s.start_epoch for s in self.plan.stages if s.start_epoch
                    > runner.epoch and s.short_cycle != stage.short_cycle),
                   self.plan.max_epochs)
        self.watch.start_stage(
            f'epoch {runner.epoch} (batches {sizes}, '
            f'T={stage.shape.clip_len}, S={stage.shape.crop_size})',
            time.perf_counter() - start,
            self.plan.iter_at(end) - self.plan.iter_at(runner.epoch),
            sum(sizes) / len(sizes) * self.plan.clips_per_sample)

    def build_loader(self, runner, stage: MultigridStage,
                     short_cycle: bool = True):
        """Train loader of a stage reusing the recipe's dataset object.

        Args:
            runner (Runner): The runner.
            stage (MultigridStage): A stage of the plan.
            short_cycle (bool): False: the long-cycle shape only, for precise
                BN. Defaults to True.

        Returns:
            DataLoader: The loader, its batches by
            :class:`~mmext.multigrid.data.ShortCycleBatchSampler`, seeded per
            stage so augmentations are not replayed.
        """
        shapes = stage.short_cycle if short_cycle else stage.short_cycle[-1:]
        dataset = MultigridDataset(self._dataset, [
            resize_pipeline(self._pipeline, s.clip_len, s.crop_size)
            for s in shapes], skip_broken_clips=self.skip_broken_clips)
        cfg = copy.deepcopy(runner.cfg.train_dataloader)
        for key in ('batch_size', 'batch_sampler', 'shuffle', 'drop_last'):
            cfg.pop(key, None)
        seed = runner.seed + _STAGE_SEED_STRIDE * self.plan.stages.index(stage)
        sampler = DATA_SAMPLERS.build(
            cfg.pop('sampler'), default_args=dict(dataset=dataset,
                                                  seed=runner.seed))
        cfg.update(dataset=dataset, sampler=sampler,
                   batch_sampler=ShortCycleBatchSampler(
                       sampler, self.plan.batch_sizes(stage, short_cycle)))
        return Runner.build_dataloader(cfg, seed=seed)

    def after_train_epoch(self, runner) -> None:
        """Watch the epoch's last iteration; count skipped clips; time the
        epoch-based checkpoints; precise BN before validation and saving
        (PySlowFast's rule: otherwise the statistics go unread).

        Args:
            runner (Runner): The runner.
        """
        self._watch_last_iteration(runner)
        self._report_skipped(runner)
        self._report_frame_cache(runner)
        done = runner.epoch + 1
        for hook, epochs in self._checkpoint_epochs.items():
            save_checkpoint_after(hook, done, done in epochs)
        iters = self.precise_bn_iters
        if not iters or not reads_bn_statistics_after_epoch(runner):
            return
        stage = self.plan.stage_at(runner.epoch)
        model = unwrap_model(runner.model)
        loader = self.build_loader(runner, stage, short_cycle=False)
        loader.batch_sampler.sampler.set_epoch(runner.epoch)

        def forward(batch):
            data = model.data_preprocessor(batch, True)
            model(**data, mode='tensor')

        start = time.perf_counter()
        n = update_precise_bn(model, itertools.islice(loader, iters), forward)
        # One pass over the data at most: more would repeat clips.
        _log(f'precise BN over {n} batches (precise_bn_iters={iters}, one '
             f'pass {len(loader)}) at epoch {runner.epoch} '
             f'({time.perf_counter() - start:.1f} s)')
        runner.visualizer.add_scalars({SCALAR_PRECISE_BN: n},
                                      step=runner.iter)

    def _report_skipped(self, runner) -> None:
        """Log the broken clips the epoch skipped (summed over ranks)."""
        if not self.skip_broken_clips:
            return
        dataset = runner.train_loop.dataloader.dataset
        count = torch.tensor(dataset.skipped_clips)
        all_reduce(count)
        dataset.reset_skipped()
        if count.item():
            _log(f'epoch {runner.epoch} skipped {count.item()} broken clips '
                 f'(skip_broken_clips=True)', logging.WARNING)

    def _report_frame_cache(self, runner) -> None:
        """Log the epoch's frame-cache hit rate (a CachedVideoDataset's;
        this process)."""
        cache = getattr(self._dataset, 'frame_cache', None)
        if cache is None or not cache.hits + cache.misses:
            return
        loads = cache.hits + cache.misses
        _log(f'epoch {runner.epoch}: frame cache hits {cache.hits / loads:.0%}'
             f' of {loads} loads ({cache.misses} decoded and stored)')
        cache.reset_counts()

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        """Record the schedule (the BN keys are the recipe's already).

        Args:
            runner (Runner): The runner.
            checkpoint (dict): The checkpoint being saved; gets the plan's
                :func:`~mmext.multigrid.resume.resume_signature`.
        """
        checkpoint.setdefault('meta', {})[CHECKPOINT_KEY] = (
            resume_signature(self.plan))

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        """Remember which multigrid schedule (if any) the checkpoint ran.

        Args:
            runner (Runner): The runner.
            checkpoint (dict): The loaded checkpoint.
        """
        self._loaded_schedule = checkpoint.get('meta', {}).get(CHECKPOINT_KEY)

    @logs_refusals
    def before_train(self, runner) -> None:
        """A resumed run must continue the checkpoint's schedule.

        Args:
            runner (Runner): The runner.

        Raises:
            ValueError: For a checkpoint of another schedule
                (:func:`~mmext.multigrid.resume.check_resume`).
        """
        if runner.iter > 0:
            check_resume(self.plan, self._loaded_schedule, runner.epoch,
                         runner.iter)

    def after_train(self, runner) -> None:
        """Leave the recipe's plain modules in the trained model; log the
        compiled graphs.

        Args:
            runner (Runner): The runner.
        """
        disable_sub_bn(unwrap_model(runner.model))
        remove_shape_adapters(unwrap_model(runner.model))
        self._undo_prepare()
        if self._compiled is not None:
            message = self._compiled.stop()
            if self._compiled.fallbacks:
                warn('Multigrid: ' + message)
            else:
                _log(message)

    # ------------------------------------------------------------ iterations
    def before_train_iter(self, runner, batch_idx: int,
                          data_batch=None) -> None:
        """Watch the previous iteration; scale the LR by the long-cycle batch
        factor (``lr_rule``) for this one.

        Args:
            runner (Runner): The runner.
            batch_idx (int): Index of the iteration in the epoch.
            data_batch (dict | tuple | list, optional): The batch. Defaults to
                None.
        """
        if batch_idx:
            self._watch_last_iteration(runner)
        factor = self.plan.lr_scale(self.plan.stage_at(runner.epoch))
        groups = self._param_groups(runner)
        self._restore_lrs = scale_lrs(groups, [factor] * len(groups))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None) -> None:
        """Restore the schedulers' LR.

        Args:
            runner (Runner): The runner.
            batch_idx (int): Index of the iteration in the epoch.
            data_batch (dict | tuple | list, optional): The batch. Defaults to
                None.
            outputs (dict, optional): The outputs of ``train_step``. Defaults
                to None.
        """
        if self._restore_lrs is not None:
            self._restore_lrs()
            self._restore_lrs = None

    def _watch_last_iteration(self, runner) -> None:
        """Give the watch the last iteration's times ``IterTimerHook``
        logged."""
        hub = runner.message_hub
        try:
            data = hub.get_scalar('train/data_time').current()
            total = hub.get_scalar('train/time').current()
        except KeyError:  # no IterTimerHook
            return
        dataset = runner.train_loop.dataloader.dataset
        for level, message in self.watch.record(
                data, total, getattr(dataset, 'loader_costs', dict)):
            if level >= logging.WARNING:
                warn(message)
            else:
                print_log(message, logger='current')


@register_resume_guard
def _multigrid_checkpoint_needs_the_hook(runner, checkpoint: dict,
                                         filename: str,
                                         resume_optimizer: bool) -> None:
    """Refuse to resume a multigrid checkpoint without ``MultigridHook``."""
    schedule = checkpoint.get('meta', {}).get(CHECKPOINT_KEY)
    if schedule is not None and not any(
            isinstance(hook, MultigridHook) for hook in runner.hooks):
        raise ValueError(f'{filename} is a multigrid checkpoint: resume it '
                         f'with its MultigridHook, ' + restart_hint(filename))
