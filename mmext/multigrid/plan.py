"""What a multigrid run trains: the hook's options and the run's plan.

Configs and arithmetic only, no model and no runner; the hook and
``tools/analysis/multigrid_schedule.py`` build the same plan.
"""
import copy
import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import (Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Tuple)

from mmext.compat import SCHEDULER_INF
from mmext.scheduler_checks import (STEP_TYPES, WARMUP_TYPES,
                                    unused_scheduler_values)
from .data import clips_per_sample as dataset_clips_per_sample
from .data import config_clips_per_sample, parse_grid_shape
from .schedule import (DEFAULT_LONG_CYCLE_FACTORS, DEFAULT_SHORT_CYCLE_FACTORS,
                       SHORT_CYCLE_MODES, GridShape, MultigridStage,
                       build_multigrid_schedule, iterations_per_epoch,
                       map_recipe_epoch, short_cycle_shapes, stage_at_epoch,
                       total_flops_ratio)

__all__ = ['MultigridOptions', 'MultigridPlan']


# ---------------------------------------------------------------- options
def _number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _numbers(v) -> bool:
    return isinstance(v, (list, tuple)) and all(map(_number, v))


def _long_cycle_factors(v) -> bool:
    """(t, s) pairs in (0, 1], t s^2 not decreasing, (1, 1) last."""
    if not (isinstance(v, (list, tuple)) and v and all(
            _numbers(f) and len(f) == 2 for f in v)):
        return False
    volumes = [t * s * s for t, s in v]
    return (all(0 < t <= 1 and 0 < s <= 1 for t, s in v)
            and tuple(v[-1]) == (1, 1)
            and all(b >= a for a, b in zip(volumes, volumes[1:])))


def _lr_steps(v) -> bool:
    return v is None or (isinstance(v, (list, tuple)) and len(v) >= 2
                         and all(map(_int, v)) and v[0] == 0
                         and all(b > a for a, b in zip(v, v[1:])))


def _option(default, valid: Callable[[object], bool], expected: str,
            example: str):
    """A row of the option table: default, predicate, text, example."""
    return field(default=default, metadata=dict(
        valid=valid, expected=expected, example=example))


def is_multigrid_hook(hook_cfg: dict) -> bool:
    """Whether a ``custom_hooks`` entry builds ``MultigridHook``."""
    return str(hook_cfg['type']).split('.')[-1] == 'MultigridHook'


@dataclass(frozen=True)
class MultigridOptions:
    """Options of ``MultigridHook`` (their meaning: its docstring).

    Each field is a row of the option table; sequences are stored as
    tuples. :attr:`SCHEDULE_FIELDS` define the multigrid epoch axis.

    Raises:
        ValueError: Naming the option, the value, what is expected and an
            example.
    """
    long_cycle: bool = _option(True, lambda v: isinstance(v, bool),
                               'True or False', 'False')
    short_cycle: bool = _option(True, lambda v: isinstance(v, bool),
                                'True or False', 'False')
    epoch_factor: float = _option(
        1.5, lambda v: _number(v) and v > 0,
        'a number > 0 (total epochs = max_epochs x epoch_factor)', '1.5')
    long_cycle_factors: Tuple[Tuple[float, float], ...] = _option(
        DEFAULT_LONG_CYCLE_FACTORS, _long_cycle_factors,
        '(t, s) pairs in (0, 1], coarse to fine, ending with (1, 1)',
        '[(0.25, 0.5**0.5), (0.5, 0.5**0.5), (0.5, 1), (1, 1)]')
    short_cycle_factors: Tuple[float, ...] = _option(
        DEFAULT_SHORT_CYCLE_FACTORS,
        lambda v: _numbers(v) and bool(v) and all(0 < f < 1 for f in v),
        'crop factors in (0, 1)', '[0.5, 0.5**0.5]')
    short_cycle_mode: str = _option(
        'absolute', lambda v: v in SHORT_CYCLE_MODES,
        f'one of {SHORT_CYCLE_MODES}', "'absolute'")
    bn_base_size: Optional[int] = _option(
        8, lambda v: v is None or (_int(v) and v >= 0),
        'None, 0 (no sub-batch BN) or clips per BN split', '8')
    precise_bn_iters: int = _option(
        200, lambda v: _int(v) and v >= 0, 'an int >= 0 (0: no precise BN)',
        '200')
    lr_steps: Optional[Tuple[int, ...]] = _option(
        None, _lr_steps, 'None or increasing recipe epochs starting at 0',
        '[0, 40, 80]')
    skip_broken_clips: bool = _option(
        False, lambda v: isinstance(v, bool), 'True or False', 'True')
    data_wait_threshold: Optional[float] = _option(
        0.2, lambda v: v is None or (_number(v) and 0 <= v <= 1),
        'a share in [0, 1] (0 or None: no warning)', '0.2')
    data_wait_iters: int = _option(10, lambda v: _int(v) and v >= 1,
                                   'an int >= 1', '10')
    keep_cpu_memory: bool = _option(
        True, lambda v: isinstance(v, bool), 'True or False', 'False')

    SCHEDULE_FIELDS = ('long_cycle', 'short_cycle', 'epoch_factor',
                       'long_cycle_factors', 'short_cycle_factors',
                       'short_cycle_mode')

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value, rule = getattr(self, f.name), f.metadata
            if not rule['valid'](value):
                raise ValueError(
                    f'MultigridHook option {f.name}={value!r} '
                    f'({type(value).__name__}): expected '
                    f'{rule["expected"]}, e.g. {f.name}={rule["example"]}')
        if not (self.long_cycle or self.short_cycle):
            raise ValueError('MultigridHook options long_cycle=False and '
                             'short_cycle=False leave nothing to cycle; set '
                             'one of them True.')
        for name in ('long_cycle_factors', 'short_cycle_factors',
                     'lr_steps'):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(
                    tuple(v) if isinstance(v, (list, tuple)) else v
                    for v in value))

    @classmethod
    def names(cls) -> Tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, options: dict) -> 'MultigridOptions':
        """Options from keyword values (``ValueError`` for an unknown one)."""
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise ValueError(f'unknown MultigridHook options {unknown}; '
                             f'known: {sorted(cls.names())}')
        return cls(**options)

    @classmethod
    def from_hook_config(cls, hook_cfg: dict) -> 'MultigridOptions':
        """Options of a ``custom_hooks`` entry."""
        return cls.from_dict({k: v for k, v in hook_cfg.items()
                              if k not in ('type', 'priority', '_scope_')})

    def schedule_kwargs(self) -> dict:
        """:attr:`SCHEDULE_FIELDS` as keyword arguments of
        :func:`~mmext.multigrid.build_multigrid_schedule`."""
        return {name: getattr(self, name) for name in self.SCHEDULE_FIELDS}


# ------------------------------------------------ the recipe's schedulers
def find_lr_steps(schedulers: Sequence[dict],
                  max_epochs: int) -> Tuple[List[int], Optional[float]]:
    """LR stage starts and decay of a recipe's ``param_scheduler``.

    Returns:
        tuple: ``([0] + sorted milestones inside (0, max_epochs), gamma)``
        of the epoch-based LR ``MultiStepLR``, else
        ``([0, max_epochs], None)``.
    """
    for s in schedulers:
        if str(s['type']).split('.')[-1] in STEP_TYPES and s.get(
                'by_epoch', True) and s.get('param_name', 'lr') == 'lr':
            inside = sorted({m for m in s['milestones'] if 0 < m < max_epochs})
            if inside:
                return [0] + inside, s.get('gamma', 0.1)
    return [0, max_epochs], None


def remap_param_schedulers(schedulers: Sequence[dict],
                           epoch_map: Callable[[float], float],
                           iter_at: Callable[[float], int],
                           base_epoch_len: int) -> List[dict]:
    """Copies of scheduler configs on the multigrid axis.

    ``begin``, ``end``, ``milestones`` and ``T_max`` go through
    ``epoch_map``; iteration-based schedulers (or ``convert_to_iter_based``,
    which mmengine scales by the first epoch's length) get exact counts
    from ``iter_at``.

    Args:
        schedulers (Sequence[dict]): The recipe's ``param_scheduler``.
        epoch_map (callable): Recipe epoch -> multigrid epoch.
        iter_at (callable): Multigrid epoch (float) -> iterations done.
        base_epoch_len (int): Iterations per epoch of the recipe's loader,
            to read ``by_epoch=False`` bounds in epochs.

    Returns:
        list[dict]: New configs (the input is not modified).
    """
    out = []
    for cfg in schedulers:
        cfg = copy.deepcopy(dict(cfg))
        by_epoch = cfg.get('by_epoch', True)
        to_iters = not by_epoch or cfg.pop('convert_to_iter_based', False)

        def point(x, by_epoch=by_epoch, to_iters=to_iters):
            new = epoch_map(x if by_epoch else x / base_epoch_len)
            return iter_at(new) if to_iters else int(round(new))

        begin = cfg.get('begin', 0)
        if cfg.get('end', SCHEDULER_INF) != SCHEDULER_INF:
            cfg['end'] = point(cfg['end'])
        if 'milestones' in cfg:
            cfg['milestones'] = [point(m) for m in cfg['milestones']]
        if 'T_max' in cfg:
            cfg['T_max'] = point(begin + cfg['T_max']) - point(begin)
        cfg['begin'] = point(begin)
        cfg['by_epoch'] = not to_iters
        out.append(cfg)
    return out


# ---------------------------------------------------------------- the plan
class ShapeIterations(NamedTuple):
    """Iterations one grid shape trains within one stage.

    Attributes:
        stage (MultigridStage): The stage.
        shape (GridShape): One of ``stage.short_cycle``.
        batch_size (int): Dataset indices per process.
        sub_bn_splits (int): Sub-BN splits of its batches.
        iters (int): Its iterations over the stage.
    """
    stage: MultigridStage
    shape: GridShape
    batch_size: int
    sub_bn_splits: int
    iters: int


class MultigridPlan:
    """Stages, iteration counts and schedulers of one multigrid run.

    Args:
        pipeline (list[dict]): The recipe's train pipeline config.
        batch_size (int): The recipe's per-process ``batch_size`` (base B).
        max_epochs (int): The recipe's ``train_cfg.max_epochs``.
        param_scheduler (list[dict] | dict, optional): The recipe's
            schedulers (LR stages from its epoch-based ``MultiStepLR``).
        samples_per_rank (int, optional): Dataset indices each process sees
            per epoch (``len(sampler)``); None: estimated counts only.
        recipe_iters_per_epoch (int, optional): Iterations per epoch of the
            recipe's loader; default ``ceil(samples_per_rank / batch_size)``.
        world_size (int): Processes (for the effective batch).
        accumulative_counts (int): Micro-batches per optimizer step (for
            the effective batch).
        options (MultigridOptions, optional): Default ``MultigridOptions()``.
        clips_per_sample (int): Clips one dataset index gives
            (``RepeatAugDataset``); sub-BN splits count clips, batch sizes
            and iterations count indices.

    Raises:
        ValueError: For a schedule, pipeline or batch the run cannot use
            (naming the recipe values it cannot honour); from the methods
            that need exact counts, without ``samples_per_rank``.
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
        self.world_size = int(world_size)
        self.accumulative_counts = int(accumulative_counts)
        # Effective batch / per-process batch.
        self.batch_multiplier = self.world_size * self.accumulative_counts
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
        if samples_per_rank is not None and not recipe_iters_per_epoch:
            self.recipe_iters_per_epoch = math.ceil(samples_per_rank /
                                                    self.base_batch)
        try:
            self.stages: List[MultigridStage] = build_multigrid_schedule(
                self.base_clip_len, self.base_crop_size, self.lr_steps,
                self.recipe_epochs, gamma=self.gamma,
                **self.options.schedule_kwargs())
        except ValueError as error:
            # A dropped recipe value is often the cause (a shortened run).
            dropped = self.dropped_recipe_values()
            if not dropped:
                raise
            raise ValueError(f'{error} Recipe values the schedule cannot '
                             f'honour: {" ".join(dropped)}') from error
        self._check_sub_bn()
        # (T, S) -> FLOPs of one clip's forward, set by a model check.
        self.clip_flops: Optional[Dict[Tuple[int, int], float]] = None
        self.cum_iters: Optional[List[int]] = None
        if samples_per_rank is not None:
            self.cum_iters = self._count_iterations(samples_per_rank)

    @classmethod
    def from_config(cls, cfg, samples_per_rank: Optional[int] = None,
                    world_size: int = 1,
                    recipe_iters_per_epoch: Optional[int] = None
                    ) -> 'MultigridPlan':
        """Plan of a full mmaction2 config whose ``custom_hooks`` hold
        ``MultigridHook`` (other arguments as in the constructor).

        Raises:
            ValueError: Without a ``MultigridHook``, for an unknown option,
                or as :meth:`for_config`.
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

        ``clips_per_sample`` defaults to the train dataset config's; the
        other arguments are as in the constructor.

        Raises:
            ValueError: For a train loop without ``max_epochs``, a train
                dataset without its own pipeline, or as the constructor.
        """
        if 'max_epochs' not in cfg.get('train_cfg', {}):
            raise ValueError(
                'MultigridHook needs an epoch-based train loop: train_cfg '
                'has no max_epochs. Use train_cfg = dict(type='
                '"EpochBasedTrainLoop", max_epochs=...).')
        dataset = cfg.train_dataloader.dataset
        if 'pipeline' not in dataset:
            raise ValueError(
                f'MultigridHook rewrites train_dataloader.dataset.pipeline, '
                f'but the train dataset ({dataset.get("type", "?")}) has '
                f'none: dataset wrappers are not supported. Configure the '
                f'video dataset itself as train_dataloader.dataset.')
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
        """Plan of a built runner's recipe, with exact iteration counts
        (raises as :meth:`for_config`)."""
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
        """bool: Whether iteration counts are exact."""
        return self.cum_iters is not None

    @property
    def max_epochs(self) -> int:
        """int: Multigrid epochs of the run."""
        return self.stages[-1].end_epoch

    @property
    def max_iters(self) -> int:
        """int: Exact iterations of the run."""
        return self._cum()[-1]

    def stage_at(self, epoch: int) -> MultigridStage:
        """The stage training ``epoch`` (0-based multigrid epoch)."""
        return stage_at_epoch(self.stages, epoch)

    def batch_sizes(self, stage: MultigridStage,
                    short_cycle: bool = True) -> List[int]:
        """Per-process batch sizes of ``stage`` in short-cycle order
        (``short_cycle=False``: the long-cycle batch only)."""
        shapes = stage.short_cycle if short_cycle else stage.short_cycle[-1:]
        return [self.base_batch * s.batch_factor for s in shapes]

    def _splits(self, batch: int) -> int:
        """Sub-BN splits of ``batch`` indices (PySlowFast ``NUM_SPLITS``)."""
        clips, base = batch * self.clips_per_sample, self.options.bn_base_size
        return clips // base if base and clips > base else 1

    def sub_bn_splits(self, stage: MultigridStage) -> int:
        """The most sub-BN splits of an iteration of ``stage``."""
        return max(self._splits(b) for b in self.batch_sizes(stage))

    @property
    def sub_bn_base_size(self) -> Optional[int]:
        """int | None: ``bn_base_size`` if some batch of the run splits."""
        if max(self.sub_bn_splits(s) for s in self.stages) > 1:
            return self.options.bn_base_size
        return None

    def is_shape_end(self, epoch: int) -> bool:
        """Whether ``epoch`` is the last of a long-cycle shape (a stage
        followed by one of the same shapes does not end it)."""
        stage = self.stage_at(epoch)
        if epoch + 1 != stage.end_epoch:
            return False
        following = self.stages.index(stage) + 1
        return following >= len(self.stages) or (
            self.stages[following].short_cycle != stage.short_cycle)

    def shape_iterations(self) -> List[ShapeIterations]:
        """Iterations of every grid shape of every stage, in training
        order."""
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

    # ------------------------------------------ what the run cannot honour
    def dropped_shapes(self) -> List[str]:
        """One message per LR stage whose long-cycle shapes were rounded to
        0 epochs."""
        if not self.options.long_cycle:
            return []
        # The fine-tune's first half shares the last long cycle's LR stage
        # and base shape: it must not hide that stage's own base shape.
        present = {(s.lr_stage, s.shape) for s in self.stages
                   if not s.fine_tune}
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
                    f'{lr_stage} (recipe epochs {begin}-{end}) to 0 epochs. '
                    f'Raise train_cfg.max_epochs or epoch_factor, or use '
                    f'fewer long_cycle_factors.')
        return messages

    def short_cycle_warning(self) -> Optional[str]:
        """The warning for a short cycle of other than the paper's 3 crop
        sizes; None for 3."""
        factors = list(self.options.short_cycle_factors)
        if not self.options.short_cycle or len(factors) == 2:
            return None
        return (f'short_cycle_factors={factors} gives a short cycle of '
                f'{len(factors) + 1} crop sizes; the paper\'s has 3 (two '
                f'factors and the long-cycle S, e.g. short_cycle_factors='
                f'[0.5, 0.707]).')

    def dropped_recipe_values(self) -> List[str]:
        """Messages about recipe LR scheduler values the run cannot honour.

        Any run's rules (``unused_scheduler_values``) on the recipe's axis,
        milestones that make no LR stages, a warm-up longer than the first
        LR stage.
        """
        lr = [s for s in self.param_scheduler
              if s.get('param_name', 'lr') == 'lr']
        per_epoch = self.recipe_iters_per_epoch
        messages = unused_scheduler_values(
            lr, self.recipe_epochs,
            self.recipe_epochs * per_epoch if per_epoch else None,
            axis='recipe')
        first_stage = self.lr_steps[1]
        for s in lr:
            kind = str(s['type']).split('.')[-1]
            name = f'param_scheduler {s["type"]}'
            if kind in STEP_TYPES and not self.options.lr_steps:
                early = [m for m in s.get('milestones', []) if m <= 0]
                if not s.get('by_epoch', True):
                    messages.append(
                        f'{name} has by_epoch=False: its milestones make no '
                        f'multigrid LR stages (one long cycle over the run). '
                        f'Use an epoch-based {kind} or MultigridHook('
                        f'lr_steps=...).')
                elif early:
                    messages.append(
                        f'{name} milestones {early} are no multigrid LR '
                        f'stages (LR stages start at {self.lr_steps}).')
            elif kind in WARMUP_TYPES and s.get('begin', 0) == 0:
                end = s.get('end', SCHEDULER_INF)
                if end != SCHEDULER_INF and not s.get('by_epoch', True):
                    end = end / per_epoch if per_epoch else SCHEDULER_INF
                if first_stage < end <= self.recipe_epochs:
                    messages.append(
                        f'{name} (warm-up) ends at recipe epoch {end:g}, '
                        f'after the first LR stage [0, {first_stage}): the '
                        f'whole first long cycle trains in warm-up. Shorten '
                        f'it or move the first milestone.')
        return messages

    # ------------------------------------------------------------ counts
    def iters_per_epoch(self, stage: MultigridStage) -> int:
        """Exact iterations of one epoch of ``stage``."""
        if self.samples_per_rank is None:
            raise ValueError('exact iteration counts need samples_per_rank')
        return iterations_per_epoch(self.samples_per_rank,
                                    self.batch_sizes(stage))

    def estimated_iters(self, stage: MultigridStage) -> float:
        """Iterations of ``stage`` in recipe iterations per epoch."""
        cycle = stage.short_cycle
        return stage.num_epochs * len(cycle) / sum(x.batch_factor
                                                   for x in cycle)

    def _count_iterations(self, samples_per_rank: int) -> List[int]:
        cum = [0]
        for stage in self.stages:
            n = self.iters_per_epoch(stage)
            if n == 0:
                sizes = self.batch_sizes(stage)
                if sizes[-1] <= samples_per_rank:
                    # The shape's own batch fits: the factors made the first.
                    cause = (f' made by short_cycle_factors '
                             f'{list(self.options.short_cycle_factors)}')
                    fix = ('factors closer to 1 (the default is [0.5, 0.707]) '
                           'or more data')
                else:
                    cause, fix = '', ('more data, fewer processes or a smaller '
                                      'train_dataloader.batch_size')
                raise ValueError(
                    f'{samples_per_rank} training clips per process are fewer '
                    f'than the first per-process batch, {sizes[0]}, of '
                    f'{sizes} in epochs {stage.start_epoch}-{stage.end_epoch}'
                    f'{cause}: 0 iterations. Use {fix}.')
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

    def scheduler_cfgs(self) -> List[dict]:
        """The recipe's ``param_scheduler`` on the multigrid axis
        (:func:`remap_param_schedulers`)."""
        self._cum()
        return remap_param_schedulers(
            self.param_scheduler,
            lambda x: map_recipe_epoch(self.stages, self.lr_steps,
                                       self.recipe_epochs, x),
            self.iter_at, self.recipe_iters_per_epoch)

    @property
    def flops_counted(self) -> bool:
        """bool: Whether :attr:`clip_flops` holds every shape of the run."""
        return self.clip_flops is not None and {
            (x.clip_len, x.crop_size) for s in self.stages
            for x in s.short_cycle} <= set(self.clip_flops)

    def flops_ratio(self) -> float:
        """Multigrid FLOPs over the recipe's, from :attr:`clip_flops` if
        :attr:`flops_counted`, else FLOPs ~ ``B T S^2``."""
        return total_flops_ratio(
            self.stages, self.recipe_epochs, self.base_clip_len,
            self.base_crop_size, self.clip_flops)

    def iteration_saving(self) -> float:
        """Recipe iterations over multigrid iterations (> 1 is a saving)."""
        if self.exact:
            return (self.recipe_epochs * self.recipe_iters_per_epoch /
                    self.max_iters)
        return self.recipe_epochs / sum(
            self.estimated_iters(s) for s in self.stages)

    def _check_sub_bn(self) -> None:
        """Raise unless every batch above ``bn_base_size`` clips is a
        multiple of it."""
        base = self.options.bn_base_size
        if not base:
            return
        clips = [[b * self.clips_per_sample for b in self.batch_sizes(stage)]
                 for stage in self.stages]
        for stage, batches in zip(self.stages, clips):
            bad = [b for b in batches if b > base and b % base]
            if bad:
                per_video = (f' ({self.clips_per_sample} clips per video)'
                             if self.clips_per_sample > 1 else '')
                size = max(d for d in range(1, base) if all(
                    b <= d or b % d == 0 for c in clips for b in c))
                fix = (f'bn_base_size={size} (it splits every batch of the '
                       f'run) or None' if size > 1 else 'bn_base_size=None')
                raise ValueError(
                    f'Sub-batch BN cannot split the per-device batches '
                    f'{batches}{per_video} of epochs {stage.start_epoch}-'
                    f'{stage.end_epoch} into bn_base_size={base} clips: '
                    f'{bad[0]} is not a multiple of it. Use {fix}.')

    # ------------------------------------------------------------ report
    def summary(self, warnings: Sequence[str] = ()) -> dict:
        """The plan as plain data (the schedule tool's ``--json``), with the
        checks' ``warnings``.

        Returns:
            dict: The base shape, totals (``iters`` and ``recipe_iters``
            None without exact counts, ``estimated_iters`` in recipe
            iterations per epoch; ``flops_ratio``, ``flop_saving``,
            ``flops_counted`` and ``clip_gflops``, the GFLOPs per clip of
            each ``(T, S)`` if counted), ``warnings`` and ``stages``: per stage
            :meth:`MultigridStage.to_dict` with its per-process and
            effective batch sizes and iterations.
        """
        exact = self.exact
        stages = []
        for s in self.stages:
            row = s.to_dict()
            row['batch_size'] = self.base_batch * s.shape.batch_factor
            row['effective_batch_size'] = (row['batch_size'] *
                                           self.batch_multiplier)
            row['short_cycle_batch_sizes'] = self.batch_sizes(s)
            row['iters'] = (self.iters_per_epoch(s) * s.num_epochs
                            if exact else None)
            row['estimated_iters'] = self.estimated_iters(s)
            stages.append(row)
        return dict(
            base=dict(batch_size=self.base_batch,
                      effective_batch_size=self.base_batch *
                      self.batch_multiplier,
                      clip_len=self.base_clip_len,
                      crop_size=self.base_crop_size),
            recipe_epochs=self.recipe_epochs,
            epochs=self.max_epochs,
            exact=exact,
            clips_per_process=self.samples_per_rank,
            clips_per_sample=self.clips_per_sample,
            iters=self.max_iters if exact else None,
            recipe_iters=(self.recipe_epochs * self.recipe_iters_per_epoch
                          if exact else None),
            estimated_iters=sum(self.estimated_iters(s) for s in self.stages),
            iteration_saving=self.iteration_saving(),
            flops_ratio=self.flops_ratio(),
            flop_saving=1 / self.flops_ratio(),
            flops_counted=self.flops_counted,
            clip_gflops=[dict(clip_len=t, crop_size=s, gflops=f / 1e9)
                         for (t, s), f in sorted(self.clip_flops.items())]
            if self.flops_counted else None,
            world_size=self.world_size,
            accumulative_counts=self.accumulative_counts,
            warnings=list(warnings),
            stages=stages)

    def describe(self) -> str:
        """The stage table the hook logs and the schedule tool prints."""
        info = self.summary()
        exact, base = info['exact'], info['base']
        lines = [
            f'base (B, T, S) = ({base["batch_size"]}, {base["clip_len"]}, '
            f'{base["crop_size"]}), {info["recipe_epochs"]} recipe epochs; '
            f'batch = per process, eff. batch = batch x world size '
            f'{info["world_size"]} x accumulative_counts '
            f'{info["accumulative_counts"]}',
            f'{"lr stage":>8} {"batch":>6} {"eff. batch":>10} {"T":>4} '
            f'{"S":>4} {"start":>6} {"end":>5} '
            + (f'{"iters":>7} ' if exact else
               f'{"iters (x recipe iters/epoch)":>28} ')
            + f'{"rel. LR":>8}  short-cycle (batch, S)'
        ]
        for d in info['stages']:
            cycle = [(b, x['crop_size'])
                     for b, x in zip(d['short_cycle_batch_sizes'],
                                     d['short_cycle'])]
            iters = (f'{d["iters"]:>7} ' if exact else
                     f'{d["estimated_iters"]:>28.2f} ')
            lines.append(
                f'{d["lr_stage"]:>8} {d["batch_size"]:>6} '
                f'{d["effective_batch_size"]:>10} {d["clip_len"]:>4} '
                f'{d["crop_size"]:>4} {d["start_epoch"]:>6} '
                f'{d["end_epoch"]:>5} {iters}{d["lr_factor"]:>8.4g}  {cycle}')
        saving = f'{info["iteration_saving"]:.2f}x fewer iterations'
        flops = (f'FLOPs x{info["flops_ratio"]:.3f} of the recipe '
                 f'({info["flop_saving"]:.2f}x saving, ' + (
                     'counted on the model)' if info['flops_counted'] else
                     'B*T*S^2 estimate)'))
        if exact:
            per = info['clips_per_sample']
            count = (f'{info["clips_per_process"]} clips' if per == 1 else
                     f'{info["clips_per_process"]} videos x {per} clips')
            lines.append(
                f'total: {info["epochs"]} epochs, {info["iters"]} '
                f'iterations (exact, {count} per process) vs '
                f'{info["recipe_iters"]} of the recipe -> {saving}; {flops}')
        else:
            lines.append(
                f'total: {info["epochs"]} epochs, '
                f'{info["estimated_iters"]:.1f} x recipe iters/epoch vs '
                f'{info["recipe_epochs"]} -> {saving} (estimate: incomplete '
                f'batches ignored; give the dataset for exact counts); '
                f'{flops}')
        return '\n'.join(lines)
