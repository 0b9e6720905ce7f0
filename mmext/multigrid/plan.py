"""One description of a multigrid run, shared by the hook and the tools.

:class:`MultigridPlan` turns a recipe (train pipeline, batch size, epochs,
``param_scheduler``) and the hook's :class:`MultigridOptions` into everything
the run trains: base shape, stages, exact per-epoch iteration counts for a
given number of clips per process, iterations per grid shape, where precise
BN runs, and the rebuilt scheduler configs. Configs and arithmetic only, no
model and no runner: ``tools/analysis/multigrid_schedule.py`` prints exactly
what :class:`~mmext.multigrid.MultigridHook` will train. Checks of a model
against a plan are in :mod:`.model_checks`, reports in :mod:`.report`, the
resume record in :mod:`.resume`.
"""
import math
from typing import List, NamedTuple, Optional, Tuple

from .data import clips_per_sample as dataset_clips_per_sample
from .data import config_clips_per_sample
from .lr import dropped_recipe_values, find_lr_steps, remap_param_schedulers
from .options import MultigridOptions, is_multigrid_hook
from .pipeline import parse_grid_shape
from .schedule import (GridShape, MultigridStage, build_multigrid_schedule,
                       iterations_per_epoch, map_recipe_epoch,
                       short_cycle_shapes, stage_at_epoch, total_flops_ratio)

__all__ = ['MultigridPlan', 'ShapeIterations', 'sub_bn_splits']


class ShapeIterations(NamedTuple):
    """Iterations one grid shape trains within one stage.

    Attributes:
        stage (MultigridStage): The stage.
        shape (GridShape): One of ``stage.short_cycle``.
        batch_size (int): Dataset indices (clips, or videos of
            ``RepeatAugDataset``) per process of the shape.
        sub_bn_splits (int): Sub-BN splits its iterations use
            (:func:`sub_bn_splits` of its batch in clips, i.e.
            ``batch_size`` times the plan's ``clips_per_sample``:
            ``bn_base_size`` clips per split).
        iters (int): Its iterations over the whole stage (iteration ``i`` of
            an epoch has short-cycle shape ``i % len(stage.short_cycle)``,
            see :class:`~mmext.multigrid.data.ShortCycleBatchSampler`).
    """
    stage: MultigridStage
    shape: GridShape
    batch_size: int
    sub_bn_splits: int
    iters: int


def sub_bn_splits(batch: int, bn_base_size: Optional[int]) -> int:
    """Sub-BN splits for a per-device batch (PySlowFast ``NUM_SPLITS``).

    Args:
        batch (int): Clips per device.
        bn_base_size (int, optional): Clips per BN split; None/0 disables.

    Returns:
        int: ``batch // bn_base_size`` above ``bn_base_size``, else 1.
    """
    if not bn_base_size or batch <= bn_base_size:
        return 1
    return batch // bn_base_size


class MultigridPlan:
    """Stages, iteration counts and schedulers of one multigrid run.

    Args:
        pipeline (list[dict]): The recipe's train pipeline config (base ``T``
            from ``SampleFrames``, base ``S`` from the final fixed-size crop).
        batch_size (int): The recipe's per-process ``batch_size`` (base ``B``).
        max_epochs (int): The recipe's ``train_cfg.max_epochs``.
        param_scheduler (list[dict] | dict, optional): The recipe's
            schedulers (LR stages from its epoch-based ``MultiStepLR``).
        samples_per_rank (int, optional): Clips each process sees per epoch
            (``len(sampler)``); None gives estimated iteration counts only.
        recipe_iters_per_epoch (int, optional): Iterations per epoch of the
            recipe's own loader; default ``ceil(samples_per_rank /
            batch_size)``.
        world_size (int): Processes of the run (for the effective batch).
        accumulative_counts (int): Micro-batches per optimizer step (for
            the effective batch).
        options (MultigridOptions, optional): The hook's options; default
            ``MultigridOptions()``.
        clips_per_sample (int): Clips one dataset index gives (mmaction2's
            ``RepeatAugDataset``: ``num_repeats`` clips of one decoded
            video). Batch sizes and iteration counts count dataset indices;
            sub-BN splits count clips.

    Raises:
        ValueError: For out-of-range factors or ``epoch_factor`` (see
            :func:`build_multigrid_schedule`), a pipeline without
            ``SampleFrames`` or a final fixed-size crop, a per-device batch
            sub-batch BN cannot split, or (with ``samples_per_rank``) an
            epoch with no complete batch.
    """

    def __init__(self,
                 pipeline: List[dict],
                 batch_size: int,
                 max_epochs: int,
                 param_scheduler=None,
                 samples_per_rank: Optional[int] = None,
                 recipe_iters_per_epoch: Optional[int] = None,
                 world_size: int = 1,
                 accumulative_counts: int = 1,
                 options: Optional[MultigridOptions] = None,
                 clips_per_sample: int = 1):
        self.options = options if options is not None else (
            MultigridOptions())
        # Effective batch / per-process batch.
        self.batch_multiplier = int(world_size) * int(accumulative_counts)
        self.world_size = int(world_size)
        self.accumulative_counts = int(accumulative_counts)
        self.clips_per_sample = int(clips_per_sample)
        self.base_clip_len, _, self.base_crop_size = parse_grid_shape(pipeline)
        self.base_batch = int(batch_size)
        self.recipe_epochs = int(max_epochs)
        if isinstance(param_scheduler, dict):
            param_scheduler = [param_scheduler]
        self.param_scheduler = [dict(s) for s in param_scheduler or []]
        steps, self.gamma = find_lr_steps(self.param_scheduler,
                                          self.recipe_epochs)
        self.lr_steps = list(self.options.lr_steps or steps)
        self.samples_per_rank = samples_per_rank
        self.recipe_iters_per_epoch = recipe_iters_per_epoch
        if samples_per_rank is not None:
            self.recipe_iters_per_epoch = recipe_iters_per_epoch or math.ceil(
                samples_per_rank / self.base_batch)
        try:
            self.stages: List[MultigridStage] = build_multigrid_schedule(
                self.base_clip_len, self.base_crop_size, self.lr_steps,
                self.recipe_epochs, gamma=self.gamma,
                **self.options.schedule_kwargs())
        except ValueError as error:
            # A dropped recipe value is often the cause (e.g. a shortened run).
            dropped = self.dropped_recipe_values()
            if not dropped:
                raise
            raise ValueError(f'{error} Recipe values the schedule cannot '
                             f'honour: {" ".join(dropped)}') from error
        self.check_sub_bn()
        self.cum_iters: Optional[List[int]] = None
        if samples_per_rank is not None:
            self.cum_iters = self._count_iterations(samples_per_rank)

    @classmethod
    def from_config(cls, cfg, samples_per_rank: Optional[int] = None,
                    world_size: int = 1,
                    recipe_iters_per_epoch: Optional[int] = None
                    ) -> 'MultigridPlan':
        """Plan of a config whose ``custom_hooks`` hold ``MultigridHook``.

        Args:
            cfg (Config): A full mmaction2 config.
            samples_per_rank (int, optional): As in the constructor.
            world_size (int): As in the constructor
                (``accumulative_counts`` comes from ``cfg.optim_wrapper``).
            recipe_iters_per_epoch (int, optional): As in the constructor.

        Raises:
            ValueError: If the config has no ``MultigridHook``, an unknown
                hook option, a train loop without ``max_epochs``, a train
                dataset without its own pipeline, or as the constructor.
        """
        hooks = [h for h in cfg.get('custom_hooks', [])
                 if is_multigrid_hook(h)]
        if not hooks:
            raise ValueError('The config has no mmext.MultigridHook in '
                             'custom_hooks.')
        return cls.for_config(cfg, MultigridOptions.from_hook_config(
            hooks[0]), samples_per_rank, world_size, recipe_iters_per_epoch)

    @classmethod
    def for_config(cls, cfg, options: MultigridOptions,
                   samples_per_rank: Optional[int] = None,
                   world_size: int = 1,
                   recipe_iters_per_epoch: Optional[int] = None,
                   clips_per_sample: Optional[int] = None
                   ) -> 'MultigridPlan':
        """Plan of the recipe in ``cfg`` trained with ``options``.

        ``clips_per_sample`` (default: from the train dataset's config,
        :func:`~mmext.multigrid.data.config_clips_per_sample`) and the other
        arguments are as in the constructor.

        Raises:
            ValueError: For a train loop without ``max_epochs``, a train
                dataset without its own pipeline, or as the constructor.
        """
        if 'max_epochs' not in cfg.get('train_cfg', {}):
            raise ValueError(
                'MultigridHook needs an epoch-based train loop; the config\'s '
                'train_cfg has no max_epochs. Use train_cfg = dict('
                'type="EpochBasedTrainLoop", max_epochs=...).')
        dataset = cfg.train_dataloader.dataset
        if 'pipeline' not in dataset:
            raise ValueError(
                f'MultigridHook rewrites train_dataloader.dataset.pipeline, '
                f'but the train dataset ({dataset.get("type", "?")}) has '
                f'none: dataset wrappers (RepeatDataset, ConcatDataset ...) '
                f'are not supported. Configure the video dataset and its '
                f'pipeline directly as train_dataloader.dataset.')
        if clips_per_sample is None:
            clips_per_sample = config_clips_per_sample(dataset)
        return cls(dataset.pipeline, cfg.train_dataloader.batch_size,
                   cfg.train_cfg.max_epochs, cfg.get('param_scheduler'),
                   samples_per_rank, recipe_iters_per_epoch,
                   world_size=world_size,
                   accumulative_counts=cfg.get('optim_wrapper', {}).get(
                       'accumulative_counts', 1),
                   options=options, clips_per_sample=clips_per_sample)

    @classmethod
    def for_runner(cls, runner, options: MultigridOptions
                   ) -> 'MultigridPlan':
        """Plan of a built runner's recipe, with exact iteration counts.

        Clips per process and the recipe's iterations per epoch come from
        the runner's train loader (``len(sampler)``, ``len(loader)``), the
        world size from the runner, the clips per dataset index from the
        built train dataset.

        Raises:
            ValueError: As :meth:`for_config`.
        """
        loader = runner.train_loop.dataloader
        return cls.for_config(runner.cfg, options,
                              samples_per_rank=len(loader.sampler),
                              world_size=runner.world_size,
                              recipe_iters_per_epoch=len(loader),
                              clips_per_sample=dataset_clips_per_sample(
                                  loader.dataset))

    # ------------------------------------------------------------ shapes
    @property
    def exact(self) -> bool:
        """bool: Whether iteration counts are exact (clips per rank known)."""
        return self.cum_iters is not None

    @property
    def max_epochs(self) -> int:
        """int: Multigrid epochs of the run."""
        return self.stages[-1].end_epoch

    @property
    def max_iters(self) -> int:
        """int: Exact iterations of the run.

        Raises:
            ValueError: Without ``samples_per_rank``.
        """
        return self._cum()[-1]

    def stage_at(self, epoch: int) -> MultigridStage:
        """The stage training ``epoch`` (0-based multigrid epoch)."""
        return stage_at_epoch(self.stages, epoch)

    def batch_sizes(self, stage: MultigridStage,
                    short_cycle: bool = True) -> List[int]:
        """Per-process batch sizes of ``stage``, in short-cycle order.

        Args:
            stage (MultigridStage): One of :attr:`stages`.
            short_cycle (bool): False gives the long-cycle batch only.
        """
        shapes = stage.short_cycle if short_cycle else stage.short_cycle[-1:]
        return [self.base_batch * s.batch_factor for s in shapes]

    def sub_bn_splits(self, stage: MultigridStage) -> int:
        """The most sub-BN splits of an iteration of ``stage``.

        Sub-batch BN splits every batch at forward time (``bn_base_size``
        clips per split, see :mod:`mmext.multigrid.bn`), so the short
        cycle's larger batches have more splits than the long-cycle one.
        """
        return max(self._splits(b) for b in self.batch_sizes(stage))

    def _splits(self, batch: int) -> int:
        """Sub-BN splits of a batch of ``batch`` dataset indices."""
        return sub_bn_splits(batch * self.clips_per_sample,
                             self.options.bn_base_size)

    def is_shape_end(self, epoch: int) -> bool:
        """Whether ``epoch`` is the last of a long-cycle shape (precise BN).

        A stage followed by one of the same shapes (the fine-tune's LR drop)
        does not end its shape.
        """
        stage = self.stage_at(epoch)
        if epoch + 1 != stage.end_epoch:
            return False
        following = self.stages.index(stage) + 1
        return following >= len(self.stages) or (
            self.stages[following].short_cycle != stage.short_cycle)

    def shape_iterations(self) -> List[ShapeIterations]:
        """Iterations of every grid shape of every stage, in training order.

        Raises:
            ValueError: Without ``samples_per_rank``.
        """
        out = []
        for stage in self.stages:
            n = self.iters_per_epoch(stage)
            cycle = stage.short_cycle
            for k, (shape, batch) in enumerate(
                    zip(cycle, self.batch_sizes(stage))):
                per_epoch = n // len(cycle) + (k < n % len(cycle))
                out.append(ShapeIterations(
                    stage, shape, batch, self._splits(batch),
                    per_epoch * stage.num_epochs))
        return out

    def precise_bn_stages(self) -> List[MultigridStage]:
        """The stages after whose last epoch precise BN may run (at the
        stage's long-cycle shape): the hook runs it there when validation, a
        checkpoint or the last epoch follows; none with
        ``precise_bn_iters=0``."""
        if not self.options.precise_bn_iters:
            return []
        return [s for s in self.stages if self.is_shape_end(s.end_epoch - 1)]

    def dropped_shapes(self) -> List[str]:
        """Messages naming long-cycle shapes that rounding left out.

        Epochs are rounded per stage, so a short recipe (or LR stage) trains
        some long-cycle shapes for 0 epochs; one message per LR stage that
        lost shapes, each shape as per-process (batch, T, S).
        """
        if not self.options.long_cycle:
            return []
        present = {(s.lr_stage, s.shape) for s in self.stages}
        planned = [
            short_cycle_shapes(self.base_clip_len, self.base_crop_size,
                               int(round(self.base_clip_len * t)),
                               int(round(self.base_crop_size * s)),
                               self.options.short_cycle_factors,
                               self.options.short_cycle_mode)[-1]
            for t, s in self.options.long_cycle_factors
        ]
        messages = []
        for lr_stage, (begin, end) in enumerate(
                zip(self.lr_steps, self.lr_steps[1:])):
            lost = [(self.base_batch * x.batch_factor, x.clip_len,
                     x.crop_size) for x in planned
                    if (lr_stage, x) not in present]
            if lost:
                messages.append(
                    f'The multigrid schedule rounds the long-cycle shapes '
                    f'{lost} (per-process batch, T, S) of LR stage '
                    f'{lr_stage} (recipe epochs {begin}-{end}) to 0 epochs, '
                    f'so they are not trained. Raise train_cfg.max_epochs or '
                    f'epoch_factor, or list fewer long_cycle_factors '
                    f'(about 6 recipe epochs per LR stage train all 4 '
                    f'default shapes).')
        return messages

    def dropped_recipe_values(self) -> List[str]:
        """Messages about recipe values the plan cannot honour (see
        :func:`mmext.multigrid.lr.dropped_recipe_values`)."""
        return dropped_recipe_values(self.param_scheduler,
                                     self.recipe_epochs, self.lr_steps,
                                     bool(self.options.lr_steps),
                                     self.recipe_iters_per_epoch)

    # ------------------------------------------------------------ counts
    def iters_per_epoch(self, stage: MultigridStage) -> int:
        """Exact iterations of one epoch of ``stage``.

        Raises:
            ValueError: Without ``samples_per_rank``.
        """
        if self.samples_per_rank is None:
            raise ValueError('exact iteration counts need samples_per_rank')
        return iterations_per_epoch(self.samples_per_rank,
                                    self.batch_sizes(stage))

    def estimated_iters(self, stage: MultigridStage) -> float:
        """Iterations of ``stage`` in units of recipe iterations per epoch.

        Ignores the incomplete batches that training drops; use
        :meth:`iters_per_epoch` when the dataset size is known.
        """
        cycle = stage.short_cycle
        return stage.num_epochs * len(cycle) / sum(x.batch_factor
                                                   for x in cycle)

    def _count_iterations(self, samples_per_rank: int) -> List[int]:
        cum = [0]
        for stage in self.stages:
            n = self.iters_per_epoch(stage)
            if n == 0:
                raise ValueError(
                    f'Each process sees {samples_per_rank} training clips '
                    f'per epoch, fewer than one multigrid batch of epochs '
                    f'{stage.start_epoch}-{stage.end_epoch} (per-process '
                    f'batches {self.batch_sizes(stage)}), so they would '
                    f'train 0 iterations. Use more data, fewer processes or '
                    f'a smaller train_dataloader.batch_size.')
            cum += [cum[-1] + n * (k + 1) for k in range(stage.num_epochs)]
        return cum

    def _cum(self) -> List[int]:
        if self.cum_iters is None:
            raise ValueError('exact iteration counts need samples_per_rank')
        return self.cum_iters

    def iter_at(self, epoch: float) -> int:
        """Iterations done at (fractional) multigrid ``epoch``."""
        cum = self._cum()
        k = min(max(int(math.floor(epoch)), 0), len(cum) - 2)
        return int(round(cum[k] + (epoch - k) * (cum[k + 1] - cum[k])))

    def recipe_to_multigrid_epoch(self, epoch: float) -> float:
        """Map a recipe epoch onto the multigrid epoch axis."""
        return map_recipe_epoch(self.stages, self.lr_steps,
                                self.recipe_epochs, epoch)

    def scheduler_cfgs(self) -> List[dict]:
        """The recipe's ``param_scheduler`` moved onto the multigrid axis.

        See :func:`mmext.multigrid.lr.remap_param_schedulers`.

        Raises:
            ValueError: Without ``samples_per_rank``.
        """
        self._cum()
        return remap_param_schedulers(self.param_scheduler,
                                      self.recipe_to_multigrid_epoch,
                                      self.iter_at,
                                      self.recipe_iters_per_epoch)

    def flops_ratio(self) -> float:
        """Multigrid FLOPs over the recipe's (FLOPs ~ ``B T S^2``)."""
        return total_flops_ratio(self.stages, self.recipe_epochs,
                                 self.base_clip_len, self.base_crop_size)

    def iteration_saving(self) -> float:
        """Recipe iterations over multigrid iterations (> 1 is a saving).

        Exact with ``samples_per_rank``, else from :meth:`estimated_iters`.
        """
        if self.exact:
            return (self.recipe_epochs * self.recipe_iters_per_epoch /
                    self.max_iters)
        return self.recipe_epochs / sum(
            self.estimated_iters(s) for s in self.stages)

    # ------------------------------------------------------------ checks
    def check_sub_bn(self) -> None:
        """Check that sub-batch BN can split every batch of the run, in
        clips (``clips_per_sample`` times the plan's batch sizes; run by the
        constructor).

        Raises:
            ValueError: Naming the batches, the stage and the fixes.
        """
        base = self.options.bn_base_size
        if not base:
            return
        clips_per_sample = self.clips_per_sample
        for stage in self.stages:
            sizes = [b * clips_per_sample for b in self.batch_sizes(stage)]
            if [b for b in sizes if b > base and b % base]:
                per_video = (f' ({clips_per_sample} clips per video: '
                             f'RepeatAugDataset num_repeats)'
                             if clips_per_sample > 1 else '')
                batch = ('train_dataloader.batch_size' if clips_per_sample
                         == 1 else f'{clips_per_sample} x '
                         f'train_dataloader.batch_size')
                raise ValueError(
                    f'Sub-batch BN cannot split per-device batches {sizes}'
                    f'{per_video} (epochs {stage.start_epoch}-'
                    f'{stage.end_epoch}) into groups of bn_base_size={base}.'
                    f' Make {batch} a multiple of bn_base_size or a divisor '
                    f'of it, or change bn_base_size.')

    def stage_shapes(self) -> List[Tuple[int, int, int]]:
        """Distinct long-cycle ``(batch, T, S)`` of the run, in order."""
        seen = []
        for s in self.stages:
            key = (self.base_batch * s.shape.batch_factor, s.shape.clip_len,
                   s.shape.crop_size)
            if key not in seen:
                seen.append(key)
        return seen
