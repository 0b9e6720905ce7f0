"""Runner glue of multigrid training; the math is in :mod:`mmext.multigrid`."""
import copy
import itertools
import math
from typing import List, Optional, Sequence, Tuple

from mmengine.dist import get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper
from mmengine.optim import BaseOptimWrapper
from mmengine.registry import DATA_SAMPLERS
from mmengine.runner import EpochBasedTrainLoop, Runner

from mmext.datasets import MultigridDataset, ShortCycleBatchSampler
from mmext.multigrid import (DEFAULT_LONG_CYCLE_FACTORS,
                             DEFAULT_SHORT_CYCLE_FACTORS, MultigridStage,
                             build_multigrid_schedule, iterations_per_epoch,
                             map_recipe_epoch, stage_at_epoch)
from mmext.multigrid.bn import (aggregate_sub_bn_stats, set_sub_bn_splits,
                                to_plain_bn_state_dict, update_precise_bn)
from mmext.multigrid.lr import find_lr_steps, remap_param_schedulers
from mmext.multigrid.pipeline import parse_grid_shape, resize_pipeline
from mmext.registry import HOOKS

__all__ = ['MultigridHook']

# Seeds of rebuilt loaders differ per stage so augmentations are not replayed.
_STAGE_SEED_STRIDE = 1009


def _unwrap(model):
    return model.module if is_model_wrapper(model) else model


def check_clip_lengths(backbone, clip_lens: Sequence[int]) -> None:
    """Raise if the backbone cannot take one of the clip lengths.

    SlowFast (``resample_rate`` = tau): ``T`` must be a multiple of tau.
    ResNet3d-family (I3D ...): the temporal strides of ``conv1``, ``pool1``
    and ``pool2`` (kernel 2) need ``T >= conv1_stride_t * pool1_stride_t *
    2`` (8 for mmaction2's I3D R50).

    Raises:
        ValueError: Naming the clip length and what to change.
    """
    tau = getattr(backbone, 'resample_rate', None)
    if tau:
        bad = [t for t in clip_lens if t % tau]
        if bad:
            raise ValueError(
                f'SlowFast needs clip lengths that are multiples of its '
                f'resample_rate (tau={tau}); the multigrid schedule uses '
                f'T={bad}. Change long_cycle_factors or the recipe\'s '
                f'SampleFrames.clip_len.')
        return
    if hasattr(backbone, 'conv1_stride_t') and hasattr(
            backbone, 'pool1_stride_t'):
        min_t = backbone.conv1_stride_t * backbone.pool1_stride_t * (
            2 if getattr(backbone, 'with_pool2', False) else 1)
        bad = [t for t in clip_lens if t < min_t]
        if bad:
            raise ValueError(
                f'{type(backbone).__name__} needs clip lengths T >= {min_t} '
                f'(temporal strides of conv1, pool1 and pool2); the '
                f'multigrid schedule uses T={bad}. Use larger t factors in '
                f'long_cycle_factors or a longer SampleFrames.clip_len.')


def sub_bn_splits(batch: int, bn_base_size: Optional[int]) -> int:
    """Sub-BN splits for a per-device batch (PySlowFast ``NUM_SPLITS``)."""
    if not bn_base_size or batch <= bn_base_size:
        return 1
    return batch // bn_base_size


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
    above ``bn_base_size``, precise BN at the end of each long-cycle shape,
    and writes checkpoints with plain ``BatchNorm3d`` keys. The stage is
    derived from ``runner.epoch``, so resuming is exact.

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
        precise_bn_iters (int): Batches for precise BN at the end of each
            long-cycle shape; 0 disables it.
        lr_steps (Sequence[int], optional): LR stage starts in recipe epochs
            (``[0, ...]``); default from the recipe's ``MultiStepLR``, else
            ``[0, max_epochs]``.

    Raises:
        ValueError: At construction for a negative ``bn_base_size`` or
            ``precise_bn_iters``.
        TypeError: In ``before_run`` if the train loop is not epoch based.
        ValueError: In ``before_run`` for out-of-range factors or
            ``epoch_factor`` (see :func:`build_multigrid_schedule`), a train
            dataset without its own pipeline (dataset wrappers), a pipeline
            without ``SampleFrames`` or final fixed-size crop, a clip length
            the backbone cannot take, a batch sub-batch BN cannot split, or
            a dataset too small for one batch of some stage.
    """

    priority = 'HIGHEST'  # before RuntimeInfoHook logs the LR and before
    # DistSamplerSeedHook calls set_epoch on the loader's sampler.

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
                 lr_steps: Optional[Sequence[int]] = None):
        if bn_base_size is not None and bn_base_size < 0:
            raise ValueError(f'bn_base_size must be None, 0 (no sub-batch '
                             f'BN) or a positive clip count, got '
                             f'{bn_base_size}')
        if not isinstance(precise_bn_iters, int) or precise_bn_iters < 0:
            raise ValueError(f'precise_bn_iters must be an int >= 0 (0 '
                             f'disables precise BN), got {precise_bn_iters}')
        self.schedule_args = dict(
            long_cycle=long_cycle,
            short_cycle=short_cycle,
            long_cycle_factors=[tuple(f) for f in long_cycle_factors],
            short_cycle_factors=list(short_cycle_factors),
            epoch_factor=epoch_factor,
            short_cycle_mode=short_cycle_mode)
        self.bn_base_size = bn_base_size
        self.precise_bn_iters = precise_bn_iters
        self.lr_steps = lr_steps
        self.stages: List[MultigridStage] = []
        self._loader_stage: Optional[MultigridStage] = None
        self._saved_lrs: List[float] = []

    # ------------------------------------------------------------ set-up
    def before_run(self, runner) -> None:
        """Check the recipe, build the schedule and re-time the run.

        Only for training: ``tools/test.py`` with a multigrid config runs the
        recipe unchanged (its train loop and optimizer are never built).
        """
        if not isinstance(runner.optim_wrapper, BaseOptimWrapper):
            return
        loop = runner.train_loop
        if not isinstance(loop, EpochBasedTrainLoop):
            raise TypeError(
                f'MultigridHook needs an epoch-based train loop, got '
                f'{type(loop).__name__}. Use train_cfg = dict('
                f'type="EpochBasedTrainLoop", max_epochs=...).')
        dl_cfg = runner.cfg.train_dataloader
        if 'pipeline' not in dl_cfg.dataset:
            raise ValueError(
                f'MultigridHook rewrites train_dataloader.dataset.pipeline, '
                f'but the train dataset '
                f'({dl_cfg.dataset.get("type", "?")}) has none: dataset '
                f'wrappers (RepeatDataset, ConcatDataset ...) are not '
                f'supported. Configure the video dataset and its pipeline '
                f'directly as train_dataloader.dataset.')
        self._pipeline = list(dl_cfg.dataset.pipeline)
        self.base_t, _, self.base_s = parse_grid_shape(self._pipeline)
        self.base_b = dl_cfg.batch_size
        self._dataset = loop.dataloader.dataset
        recipe_epochs = loop.max_epochs
        schedulers = runner.cfg.get('param_scheduler') or []
        if isinstance(schedulers, dict):
            schedulers = [schedulers]
        steps, gamma = find_lr_steps(schedulers, recipe_epochs)
        steps = list(self.lr_steps or steps)
        self.stages = build_multigrid_schedule(
            self.base_t, self.base_s, steps, recipe_epochs, gamma=gamma,
            **self.schedule_args)
        self._check(runner)

        # Exact iteration count of every epoch: shapes depend on the epoch.
        per_rank = len(loop.dataloader.sampler)
        self._cum_iters = [0]
        for stage in self.stages:
            n = iterations_per_epoch(per_rank, self._batch_sizes(stage))
            if n == 0:
                raise ValueError(
                    f'Each process sees {per_rank} training clips per epoch, '
                    f'fewer than one multigrid batch of epochs '
                    f'{stage.start_epoch}-{stage.end_epoch} (per-process '
                    f'batches {self._batch_sizes(stage)}), so they would '
                    f'train 0 iterations. Use more data, fewer processes or '
                    f'a smaller train_dataloader.batch_size.')
            self._cum_iters += [
                self._cum_iters[-1] + n * (k + 1)
                for k in range(stage.num_epochs)
            ]
        base_len = len(loop.dataloader)
        loop._max_epochs = self.stages[-1].end_epoch
        loop._max_iters = self._cum_iters[-1]
        if schedulers:
            self._rebuild_schedulers(runner, schedulers, steps,
                                     recipe_epochs, base_len)
        print_log(self._describe(recipe_epochs, base_len), logger='current')

    def _batch_sizes(self, stage: MultigridStage,
                     short_cycle: bool = True) -> List[int]:
        shapes = stage.short_cycle if short_cycle else stage.short_cycle[-1:]
        return [self.base_b * s.batch_factor for s in shapes]

    def _check(self, runner) -> None:
        model = _unwrap(runner.model)
        clip_lens = sorted({s.shape.clip_len for s in self.stages})
        if hasattr(model, 'backbone'):
            check_clip_lengths(model.backbone, clip_lens)
        for stage in self.stages if self.bn_base_size else []:
            batch = self.base_b * stage.shape.batch_factor
            splits = sub_bn_splits(batch, self.bn_base_size)
            if (batch > self.bn_base_size and batch % self.bn_base_size) or [
                    b for b in self._batch_sizes(stage) if b % splits]:
                raise ValueError(
                    f'Sub-batch BN cannot split per-device batches '
                    f'{self._batch_sizes(stage)} (epochs '
                    f'{stage.start_epoch}-{stage.end_epoch}) into groups of '
                    f'bn_base_size={self.bn_base_size}. Make '
                    f'train_dataloader.batch_size a multiple of '
                    f'bn_base_size or a divisor of it, or change '
                    f'bn_base_size.')

    def _rebuild_schedulers(self, runner, schedulers, steps, recipe_epochs,
                            base_len) -> None:
        """Replace the runner's schedulers by ones on the multigrid axis."""
        cum = self._cum_iters

        def iter_at(epoch: float) -> int:
            k = min(max(int(math.floor(epoch)), 0), len(cum) - 2)
            return int(round(cum[k] + (epoch - k) * (cum[k + 1] - cum[k])))

        new_cfgs = remap_param_schedulers(
            schedulers,
            lambda e: map_recipe_epoch(self.stages, steps, recipe_epochs, e),
            iter_at, base_len)
        # The first build already applied e.g. LinearLR's start factor.
        for group in self._param_groups(runner):
            for key in [k for k in group if k.startswith('initial_')]:
                group[key[len('initial_'):]] = group[key]
        runner.param_schedulers = runner.build_param_scheduler(new_cfgs)

    @staticmethod
    def _param_groups(runner) -> List[dict]:
        """Param groups of the optimizer(s), without the wrapper's extras."""
        wrapper = runner.optim_wrapper
        wrappers = list(getattr(wrapper, 'optim_wrappers', {}).values())
        return [
            g for w in wrappers or [wrapper] for g in w.optimizer.param_groups
        ]

    def _describe(self, recipe_epochs: int, base_len: int) -> str:
        lines = [
            f'Multigrid: base (B, T, S) = ({self.base_b}, {self.base_t}, '
            f'{self.base_s}); {recipe_epochs} recipe epochs x {base_len} '
            f'iters -> {self.stages[-1].end_epoch} epochs, '
            f'{self._cum_iters[-1]} iters'
        ]
        for s in self.stages:
            lines.append(
                f'  epochs {s.start_epoch:>4}-{s.end_epoch:<4} lr stage '
                f'{s.lr_stage} lr x{s.lr_factor:g} batches '
                f'{self._batch_sizes(s)} T={s.shape.clip_len} crops '
                f'{[x.crop_size for x in s.short_cycle]}')
        return '\n'.join(lines)

    # ------------------------------------------------------------ epochs
    def before_train_epoch(self, runner) -> None:
        """Swap in the loader and BN splits of the epoch's stage."""
        stage = stage_at_epoch(self.stages, runner.epoch)
        if self._loader_stage is not None and (
                self._loader_stage.short_cycle == stage.short_cycle):
            return
        runner.train_loop.dataloader = self.build_loader(runner, stage)
        self._loader_stage = stage
        if self.bn_base_size:
            set_sub_bn_splits(
                _unwrap(runner.model),
                sub_bn_splits(self.base_b * stage.shape.batch_factor,
                              self.bn_base_size))
        print_log(
            f'Multigrid: epoch {runner.epoch}: batches '
            f'{self._batch_sizes(stage)}, T={stage.shape.clip_len}, crops '
            f'{[s.crop_size for s in stage.short_cycle]}, '
            f'{len(runner.train_loop.dataloader)} iters/epoch',
            logger='current')

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
        dataset = MultigridDataset(self._dataset, [
            resize_pipeline(self._pipeline, s.clip_len, s.crop_size)
            for s in shapes
        ])
        cfg = copy.deepcopy(runner.cfg.train_dataloader)
        for key in ('batch_size', 'batch_sampler', 'shuffle', 'drop_last'):
            cfg.pop(key, None)
        seed = runner.seed + _STAGE_SEED_STRIDE * self.stages.index(stage)
        sampler = DATA_SAMPLERS.build(
            cfg.pop('sampler'), default_args=dict(dataset=dataset,
                                                  seed=runner.seed))
        cfg.update(
            dataset=dataset,
            sampler=sampler,
            batch_sampler=ShortCycleBatchSampler(
                sampler, self._batch_sizes(stage, short_cycle)))
        return Runner.build_dataloader(cfg, seed=seed)

    def after_train_epoch(self, runner) -> None:
        """Precise BN at the end of each long-cycle shape."""
        stage = stage_at_epoch(self.stages, runner.epoch)
        if not self.precise_bn_iters or runner.epoch + 1 != stage.end_epoch:
            return
        following = self.stages.index(stage) + 1
        if following < len(self.stages) and (
                self.stages[following].short_cycle == stage.short_cycle):
            return  # an LR drop, not a shape change (the fine-tune halves)
        model = _unwrap(runner.model)
        loader = self.build_loader(runner, stage, short_cycle=False)
        loader.batch_sampler.sampler.set_epoch(runner.epoch)

        def forward(batch):
            data = model.data_preprocessor(batch, True)
            model(**data, mode='tensor')

        n = update_precise_bn(
            model, itertools.islice(loader, self.precise_bn_iters), forward)
        print_log(f'Multigrid: precise BN over {n} batches at epoch '
                  f'{runner.epoch}', logger='current')

    def before_val_epoch(self, runner) -> None:
        """Merge sub-BN statistics for evaluation."""
        aggregate_sub_bn_stats(_unwrap(runner.model))

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        """Save plain ``BatchNorm3d`` keys (loadable by the recipe model)."""
        model = _unwrap(runner.model)
        aggregate_sub_bn_stats(model)
        to_plain_bn_state_dict(model, checkpoint['state_dict'])

    def after_train(self, runner) -> None:
        """Leave the recipe's plain BN modules in the trained model."""
        set_sub_bn_splits(_unwrap(runner.model), 1)

    # ------------------------------------------------------------ iterations
    def before_train_iter(self, runner, batch_idx: int,
                          data_batch=None) -> None:
        """Scale the LR by the long-cycle batch factor for this iteration."""
        stage = stage_at_epoch(self.stages, runner.epoch)
        factor = stage.shape.batch_factor
        groups = self._param_groups(runner)
        self._saved_lrs = [g['lr'] for g in groups]
        for g in groups:
            g['lr'] = g['lr'] * factor

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None) -> None:
        """Restore the schedulers' LR before they step."""
        for g, lr in zip(self._param_groups(runner), self._saved_lrs):
            g['lr'] = lr

