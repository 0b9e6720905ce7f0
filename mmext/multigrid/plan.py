"""One description of a multigrid run, shared by the hook and the tools.

:class:`MultigridPlan` turns a recipe (train pipeline, batch size, epochs,
``param_scheduler``) and the hook's options into everything the run trains:
base shape, stages, exact per-epoch iteration counts for a given number of
clips per process, the rebuilt scheduler configs, and the checks a recipe
must pass before training. No runner is involved, so
``tools/analysis/multigrid_schedule.py`` prints exactly what
:class:`~mmext.multigrid.MultigridHook` will train.
"""
import math
import warnings
from typing import List, Optional, Sequence, Tuple

from .bn import (SPLITTABLE_BN_TYPES, bn_layers_in_training,
                 unsplittable_bn_layers)
from .lr import INF, STEP_TYPES, find_lr_steps, remap_param_schedulers
from .monitor import DATA_WAIT_THRESHOLD
from .pipeline import parse_grid_shape
from .schedule import (DEFAULT_LONG_CYCLE_FACTORS, DEFAULT_SHORT_CYCLE_FACTORS,
                       MultigridStage, build_multigrid_schedule,
                       iterations_per_epoch, map_recipe_epoch, stage_at_epoch,
                       total_flops_ratio)

__all__ = ['MultigridPlan', 'HOOK_OPTIONS', 'CHECKPOINT_KEY',
           'validate_options', 'check_clip_lengths', 'sub_bn_splits',
           'is_multigrid_hook']

# Where a multigrid run's checkpoints record its schedule (``meta``).
CHECKPOINT_KEY = 'mmext_multigrid'

# Options of MultigridHook, with their defaults.
HOOK_OPTIONS = dict(
    long_cycle=True,
    short_cycle=True,
    epoch_factor=1.5,
    long_cycle_factors=DEFAULT_LONG_CYCLE_FACTORS,
    short_cycle_factors=DEFAULT_SHORT_CYCLE_FACTORS,
    short_cycle_mode='absolute',
    bn_base_size=8,
    precise_bn_iters=200,
    lr_steps=None,
    skip_broken_clips=False,
    data_wait_threshold=DATA_WAIT_THRESHOLD,
    data_wait_iters=10)
_WARMUP_TYPES = ('LinearLR', 'ConstantLR', 'LinearParamScheduler',
                 'ConstantParamScheduler')
_SCHEDULE_OPTIONS = ('long_cycle', 'short_cycle', 'epoch_factor',
                     'long_cycle_factors', 'short_cycle_factors',
                     'short_cycle_mode')


def is_multigrid_hook(hook_cfg: dict) -> bool:
    """Whether a ``custom_hooks`` entry builds ``MultigridHook``, with or
    without the ``mmext.`` scope prefix."""
    return hook_cfg['type'].split('.')[-1] == 'MultigridHook'


def validate_options(options: dict) -> dict:
    """The hook's options completed with defaults, or a ``ValueError``.

    Args:
        options (dict): A subset of ``HOOK_OPTIONS``.

    Returns:
        dict: All of ``HOOK_OPTIONS``.

    Raises:
        ValueError: For an unknown option, a negative ``bn_base_size``, a
            ``precise_bn_iters`` that is not an int >= 0, a non-bool
            ``skip_broken_clips``, a ``data_wait_threshold`` outside [0, 1]
            or a ``data_wait_iters`` that is not an int >= 1.
    """
    unknown = sorted(set(options) - set(HOOK_OPTIONS))
    if unknown:
        raise ValueError(f'unknown MultigridHook options {unknown}; known: '
                         f'{sorted(HOOK_OPTIONS)}')
    options = dict(HOOK_OPTIONS, **options)
    base = options['bn_base_size']
    if base is not None and base < 0:
        raise ValueError(f'bn_base_size must be None, 0 (no sub-batch BN) or '
                         f'a positive clip count, got {base}')
    iters = options['precise_bn_iters']
    if not isinstance(iters, int) or iters < 0:
        raise ValueError(f'precise_bn_iters must be an int >= 0 (0 disables '
                         f'precise BN), got {iters}')
    if not isinstance(options['skip_broken_clips'], bool):
        raise ValueError(f'skip_broken_clips must be True or False, got '
                         f'{options["skip_broken_clips"]!r}')
    threshold = options['data_wait_threshold']
    if threshold is not None and not 0 <= threshold <= 1:
        raise ValueError(f'data_wait_threshold must be a share in [0, 1] (0 '
                         f'or None disables the data-wait warning), got '
                         f'{threshold}')
    watch = options['data_wait_iters']
    if not isinstance(watch, int) or watch < 1:
        raise ValueError(f'data_wait_iters must be an int >= 1, got {watch}')
    return options


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


def check_clip_lengths(backbone, clip_lens: Sequence[int]) -> None:
    """Raise if the backbone cannot take one of the clip lengths.

    SlowFast (``resample_rate`` = tau): ``T`` must be a multiple of tau.
    ResNet3d-family (I3D ...): the temporal strides of ``conv1``, ``pool1``
    and ``pool2`` (kernel 2) need ``T >= conv1_stride_t * pool1_stride_t *
    2`` (8 for mmaction2's I3D R50).

    Args:
        backbone (nn.Module): The recognizer's backbone.
        clip_lens (Sequence[int]): Clip lengths ``T`` in frames.

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
        **options: The :class:`~mmext.multigrid.MultigridHook` options
            (``HOOK_OPTIONS``).

    Raises:
        ValueError: For an unknown option, out-of-range factors or
            ``epoch_factor`` (see :func:`build_multigrid_schedule`), a
            pipeline without ``SampleFrames`` or a final fixed-size crop, a
            per-device batch sub-batch BN cannot split, or (with
            ``samples_per_rank``) an epoch with no complete batch.
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
                 **options):
        self.options = validate_options(options)
        # Effective batch / per-process batch.
        self.batch_multiplier = int(world_size) * int(accumulative_counts)
        self.world_size = int(world_size)
        self.accumulative_counts = int(accumulative_counts)
        self.base_clip_len, _, self.base_crop_size = parse_grid_shape(pipeline)
        self.base_batch = int(batch_size)
        self.recipe_epochs = int(max_epochs)
        if isinstance(param_scheduler, dict):
            param_scheduler = [param_scheduler]
        self.param_scheduler = [dict(s) for s in param_scheduler or []]
        steps, self.gamma = find_lr_steps(self.param_scheduler,
                                          self.recipe_epochs)
        self.lr_steps = list(self.options['lr_steps'] or steps)
        self.samples_per_rank = samples_per_rank
        self.recipe_iters_per_epoch = recipe_iters_per_epoch
        if samples_per_rank is not None:
            self.recipe_iters_per_epoch = recipe_iters_per_epoch or math.ceil(
                samples_per_rank / self.base_batch)
        try:
            self.stages: List[MultigridStage] = build_multigrid_schedule(
                self.base_clip_len, self.base_crop_size, self.lr_steps,
                self.recipe_epochs, gamma=self.gamma,
                **{k: self.options[k]
                   for k in _SCHEDULE_OPTIONS})
        except ValueError as error:
            # A dropped recipe value is often the cause (e.g. a shortened run).
            dropped = self.dropped_recipe_values()
            if not dropped:
                raise
            raise ValueError(f'{error} Recipe values the schedule cannot '
                             f'honour: {" ".join(dropped)}') from error
        self._check_sub_bn()
        self.cum_iters: Optional[List[int]] = None
        if samples_per_rank is not None:
            self.cum_iters = self._count_iterations(samples_per_rank)

    @classmethod
    def from_config(cls, cfg, samples_per_rank: Optional[int] = None,
                    world_size: int = 1) -> 'MultigridPlan':
        """Plan of a config whose ``custom_hooks`` hold ``MultigridHook``.

        Args:
            cfg (Config): A full mmaction2 config.
            samples_per_rank (int, optional): As in the constructor.
            world_size (int): As in the constructor
                (``accumulative_counts`` comes from ``cfg.optim_wrapper``).

        Raises:
            ValueError: If the config has no ``MultigridHook``, or as the
                constructor.
        """
        hooks = [h for h in cfg.get('custom_hooks', [])
                 if is_multigrid_hook(h)]
        if not hooks:
            raise ValueError('The config has no mmext.MultigridHook in '
                             'custom_hooks.')
        options = {k: v for k, v in hooks[0].items()
                   if k not in ('type', 'priority')}
        if 'max_epochs' not in cfg.get('train_cfg', {}):
            raise ValueError(
                'MultigridHook needs an epoch-based train loop; the config\'s '
                'train_cfg has no max_epochs. Use train_cfg = dict('
                'type="EpochBasedTrainLoop", max_epochs=...).')
        return cls(cfg.train_dataloader.dataset.pipeline,
                   cfg.train_dataloader.batch_size, cfg.train_cfg.max_epochs,
                   cfg.get('param_scheduler'), samples_per_rank,
                   world_size=world_size,
                   accumulative_counts=cfg.get('optim_wrapper', {}).get(
                       'accumulative_counts', 1),
                   **options)

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
        """Sub-BN splits of ``stage``'s long-cycle batch."""
        return sub_bn_splits(self.base_batch * stage.shape.batch_factor,
                             self.options['bn_base_size'])

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
    def _check_sub_bn(self) -> None:
        base = self.options['bn_base_size']
        if not base:
            return
        for stage in self.stages:
            batch = self.base_batch * stage.shape.batch_factor
            splits = self.sub_bn_splits(stage)
            sizes = self.batch_sizes(stage)
            if (batch > base and batch % base) or [
                    b for b in sizes if b % splits]:
                raise ValueError(
                    f'Sub-batch BN cannot split per-device batches {sizes} '
                    f'(epochs {stage.start_epoch}-{stage.end_epoch}) into '
                    f'groups of bn_base_size={base}. Make '
                    f'train_dataloader.batch_size a multiple of '
                    f'bn_base_size or a divisor of it, or change '
                    f'bn_base_size.')

    def check(self, model=None) -> List[str]:
        """Every check of a run before training, as the hook runs them.

        Warns about recipe values the plan cannot honour
        (:meth:`warn_dropped_recipe_values`), then checks the model
        (:meth:`check_model`) and warns if precise BN would have no BN layer
        to update. ``MultigridHook`` and
        ``tools/analysis/multigrid_schedule.py`` both call this.

        Args:
            model (nn.Module, optional): The unwrapped recognizer; None skips
                the model checks.

        Returns:
            list[str]: The warnings given.

        Raises:
            ValueError: See :meth:`check_model`.
        """
        messages = self.warn_dropped_recipe_values()
        if model is None:
            return messages
        self.check_model(model)
        iters = self.options['precise_bn_iters']
        if iters and not bn_layers_in_training(model):
            messages.append(
                f'precise_bn_iters={iters}, but no BN layer of the model '
                f'trains (all are in eval mode after model.train(), e.g. '
                f'norm_eval=True): precise BN has nothing to update and is '
                f'skipped.')
            warnings.warn(messages[-1])
        return messages

    def check_model(self, model) -> None:
        """Raise if the recognizer cannot train the plan.

        Args:
            model (nn.Module): The (unwrapped) recognizer.

        Raises:
            ValueError: For a clip length the backbone cannot take (see
                :func:`check_clip_lengths`), or, when some stage splits its
                batch for sub-batch BN, a BN layer that trains and cannot be
                split (see :func:`mmext.multigrid.bn.unsplittable_bn_layers`).
        """
        if hasattr(model, 'backbone'):
            check_clip_lengths(
                model.backbone,
                sorted({s.shape.clip_len for s in self.stages}))
        splits = max(self.sub_bn_splits(s) for s in self.stages)
        bad = unsplittable_bn_layers(model) if splits > 1 else []
        if bad:
            base = self.options['bn_base_size']
            raise ValueError(
                f'Sub-batch BN (bn_base_size={base}) splits per-device '
                f'batches of up to {base * splits} clips into groups of '
                f'{base}, but cannot split these BN layers, which would '
                f'normalise over the whole per-device batch: '
                f'{", ".join(bad)}. Only layers of the kinds '
                f'{[t.__name__ for t in SPLITTABLE_BN_TYPES]} (BN3d, SyncBN '
                f'and SyncBN reverted without DDP) are split. Use one of those '
                f'kinds for them, keep them in eval mode (norm_eval), or set '
                f'bn_base_size=None to train every BN layer on the whole '
                f'per-device batch.')

    def _recipe_epochs_of(self, scheduler: dict, value: float
                          ) -> Optional[float]:
        """A scheduler bound in recipe epochs (None if unknown)."""
        if scheduler.get('by_epoch', True):
            return value
        if not self.recipe_iters_per_epoch:
            return None
        return value / self.recipe_iters_per_epoch

    def warn_dropped_recipe_values(self) -> List[str]:
        """Warn about :meth:`dropped_recipe_values`; return the messages."""
        messages = self.dropped_recipe_values()
        for message in messages:
            warnings.warn(message)
        return messages

    def dropped_recipe_values(self) -> List[str]:
        """Messages about recipe values the plan cannot honour.

        * ``MultiStepLR`` milestones outside ``(0, max_epochs)`` are not LR
          stages of the run; an iteration-based ``MultiStepLR`` gives no LR
          stages (one long cycle over the whole run);
        * an LR scheduler that begins after the run never acts, and one
          (other than a step schedule) that ends after it, e.g. a warm-up or
          cosine longer than the run, is cut before its final value;
        * a warm-up (``LinearLR``/``ConstantLR``) longer than the first LR
          stage covers the whole first long cycle.

        Iteration-based bounds are checked only when the recipe's
        iterations per epoch are known (``samples_per_rank``).
        """
        messages = []
        stage_end = self.lr_steps[1]
        for s in self.param_scheduler:
            if s.get('param_name', 'lr') != 'lr':
                continue
            kind = s['type'].split('.')[-1]
            if kind in STEP_TYPES and not self.options['lr_steps']:
                messages += self._step_warnings(s, kind)
                continue
            begin = self._recipe_epochs_of(s, s.get('begin', 0))
            end = self._recipe_epochs_of(s, s.get('end', INF))
            warmup = kind in _WARMUP_TYPES and s.get('begin', 0) == 0
            name = f'The {kind} warm-up' if warmup else kind
            if begin is not None and begin >= self.recipe_epochs:
                messages.append(
                    f'{kind} begins at recipe epoch {begin:g}, not before '
                    f'the end of the recipe\'s {self.recipe_epochs} epochs, '
                    f'so it never acts. Move its begin or raise '
                    f'train_cfg.max_epochs.')
            elif end is not None and s.get('end', INF) != INF and (
                    end > self.recipe_epochs):
                messages.append(
                    f'{name} ends at recipe epoch {end:g}, after the '
                    f'recipe\'s {self.recipe_epochs} epochs: it is cut at '
                    f'the end of the run and never reaches its final value. '
                    f'Shorten it (end) or raise train_cfg.max_epochs.')
            elif warmup and end is not None and end > stage_end:
                messages.append(
                    f'{name} ends at recipe epoch {end:g}, after '
                    f'the first LR stage [0, {stage_end}): the whole first '
                    f'long cycle trains in warm-up. Shorten the warm-up or '
                    f'check the MultiStepLR milestones.')
        return messages

    def _step_warnings(self, scheduler: dict, kind: str) -> List[str]:
        """Milestones of a step schedule that are not multigrid LR stages."""
        milestones = list(scheduler.get('milestones', []))
        if not scheduler.get('by_epoch', True):
            return [
                f'{kind} with by_epoch=False: its iteration milestones '
                f'{milestones} do not make multigrid LR stages, so the long '
                f'cycle runs once over the whole run (LR stages start at '
                f'{self.lr_steps}). Use an epoch-based {kind} or the '
                f'hook\'s lr_steps.'
            ]
        dropped = [m for m in milestones if not 0 < m < self.recipe_epochs]
        if not dropped:
            return []
        return [
            f'{kind} milestones {dropped} lie outside the recipe\'s '
            f'{self.recipe_epochs} epochs, so they are not LR stages of the '
            f'multigrid schedule (LR stages start at {self.lr_steps}).'
        ]

    # ------------------------------------------------------------ resume
    def resume_signature(self) -> dict:
        """What defines the run's epoch axis, saved in its checkpoints.

        Returns:
            dict: The schedule options, ``lr_steps``, ``recipe_epochs`` and
            ``max_epochs`` (plain values, picklable).
        """
        signature = {k: self.options[k] for k in _SCHEDULE_OPTIONS}
        signature.update(lr_steps=list(self.lr_steps),
                         recipe_epochs=self.recipe_epochs,
                         max_epochs=self.max_epochs)
        return signature

    def check_resume(self, saved: Optional[dict]) -> None:
        """Raise unless a resumed checkpoint trained this very schedule.

        Args:
            saved (dict, optional): The checkpoint's
                :meth:`resume_signature` (``meta[CHECKPOINT_KEY]``); None
                for a checkpoint of a run without multigrid.

        Raises:
            ValueError: Naming the differences and what to do instead.
        """
        if saved is None:
            raise ValueError(
                'resuming a checkpoint of a run without multigrid: its '
                'epoch, iteration and param scheduler states are on the '
                'recipe\'s schedule, not on the multigrid schedule of this '
                f'config ({self.max_epochs} epochs). Start the multigrid run '
                'from its weights with load_from=CKPT (no --resume), or '
                'resume without mmext.MultigridHook.')
        current = self.resume_signature()
        differ = [f'{k}: checkpoint {saved.get(k)!r}, config {v!r}'
                  for k, v in current.items() if saved.get(k) != v]
        if differ:
            raise ValueError(
                'the checkpoint was trained on another multigrid schedule ('
                + '; '.join(differ) + '). Resume with the checkpoint\'s '
                'MultigridHook options and recipe epochs, or start from its '
                'weights with load_from=CKPT (no --resume).')

    # ------------------------------------------------------------ report
    def rows(self) -> List[dict]:
        """One dict per stage (the ``--json`` format of the schedule tool).

        Keys of :meth:`MultigridStage.to_dict` plus ``batch_size`` (per
        process), ``effective_batch_size`` (x world size x
        ``accumulative_counts``), ``short_cycle_batch_sizes``, ``iters``
        (exact per stage, or None) and ``estimated_iters`` (in recipe
        iterations per epoch).
        """
        out = []
        for s in self.stages:
            d = s.to_dict()
            d['batch_size'] = self.base_batch * s.shape.batch_factor
            d['effective_batch_size'] = d['batch_size'] * self.batch_multiplier
            d['short_cycle_batch_sizes'] = self.batch_sizes(s)
            d['iters'] = (self.iters_per_epoch(s) * s.num_epochs
                          if self.exact else None)
            d['estimated_iters'] = self.estimated_iters(s)
            out.append(d)
        return out

    def describe(self) -> str:
        """A table of the stages, as the hook logs and the tool prints."""
        exact = self.exact
        lines = [
            f'base (B, T, S) = ({self.base_batch}, {self.base_clip_len}, '
            f'{self.base_crop_size}), {self.recipe_epochs} recipe epochs; '
            f'batch = per process, eff. batch = batch x world size '
            f'{self.world_size} x accumulative_counts '
            f'{self.accumulative_counts}',
            f'{"lr stage":>8} {"batch":>6} {"eff. batch":>10} {"T":>4} '
            f'{"S":>4} {"start":>6} '
            f'{"end":>5} '
            + (f'{"iters":>7} ' if exact else
               f'{"iters (x recipe iters/epoch)":>28} ')
            + f'{"rel. LR":>8}  short-cycle (batch, S)'
        ]
        for s, d in zip(self.stages, self.rows()):
            cycle = [(b, x.crop_size)
                     for b, x in zip(d['short_cycle_batch_sizes'],
                                     s.short_cycle)]
            iters = (f'{d["iters"]:>7} ' if exact else
                     f'{d["estimated_iters"]:>28.2f} ')
            lines.append(
                f'{s.lr_stage:>8} {d["batch_size"]:>6} '
                f'{d["effective_batch_size"]:>10} {s.shape.clip_len:>4} '
                f'{s.shape.crop_size:>4} {s.start_epoch:>6} '
                f'{s.end_epoch:>5} {iters}{s.lr_factor:>8.4g}  {cycle}')
        if exact:
            recipe = self.recipe_epochs * self.recipe_iters_per_epoch
            lines.append(
                f'total: {self.max_epochs} epochs, {self.max_iters} '
                f'iterations (exact, {self.samples_per_rank} clips per '
                f'process) vs {recipe} of the recipe -> '
                f'{self.iteration_saving():.2f}x fewer iterations; FLOPs '
                f'x{self.flops_ratio():.3f} of the recipe')
        else:
            iters = sum(self.estimated_iters(s) for s in self.stages)
            lines.append(
                f'total: {self.max_epochs} epochs, {iters:.1f} x recipe '
                f'iters/epoch vs {self.recipe_epochs} -> '
                f'{self.iteration_saving():.2f}x fewer iterations '
                f'(estimate: incomplete batches ignored; give the dataset '
                f'for exact counts); FLOPs x{self.flops_ratio():.3f} of the '
                f'recipe')
        return '\n'.join(lines)

    def stage_shapes(self) -> List[Tuple[int, int, int]]:
        """Distinct long-cycle ``(batch, T, S)`` of the run, in order."""
        seen = []
        for s in self.stages:
            key = (self.base_batch * s.shape.batch_factor, s.shape.clip_len,
                   s.shape.crop_size)
            if key not in seen:
                seen.append(key)
        return seen
