"""What a multigrid run trains: the schedule options, the recipe's
schedulers on the multigrid axis, the run's plan and what it cannot honour
(configs and arithmetic, no model, no runner)."""
import copy
import math
from dataclasses import dataclass, fields
from typing import (Callable, Dict, Iterable, List, NamedTuple, Optional,
                    Sequence, Tuple)

from mmext.compat import SCHEDULER_INF
from mmext.log import warn
from mmext.options import (LR_RULES, check_option, is_int, is_number,
                           type_name)
from mmext.registry import HOOKS
from mmext.scheduler_checks import (STEP_TYPES, WARMUP_TYPES,
                                    unused_scheduler_values)
from .data import (check_field_of_view, config_clips_per_sample,
                   parse_grid_shape)
from .schedule import (BATCH_POLICIES, DEFAULT_LONG_CYCLE_FACTORS,
                       DEFAULT_SHORT_CYCLE_FACTORS, SHORT_CYCLE_MODES,
                       GridShape, MultigridStage, NoBaseShapeEpoch,
                       build_multigrid_schedule,
                       iterations_per_epoch, map_recipe_epoch, stage_at_epoch,
                       stage_flops_ratios)

__all__ = ['MultigridOptions', 'MultigridPlan']


# ---------------------------------------------------------------- options
def _long_cycle_factors(value) -> bool:
    """(t, s) pairs in (0, 1], t s^2 not decreasing, (1, 1) last."""
    if not (isinstance(value, (list, tuple)) and value and all(
            isinstance(f, (list, tuple)) and len(f) == 2
            and all(map(is_number, f)) for f in value)):
        return False
    volumes = [t * s * s for t, s in value]
    return (all(0 < t <= 1 and 0 < s <= 1 for t, s in value)
            and tuple(value[-1]) == (1, 1)
            and all(b >= a for a, b in zip(volumes, volumes[1:])))


def _as_tuples(value):
    """A list or tuple as a tuple, its list or tuple items as tuples
    (anything else as it is)."""
    if not isinstance(value, (list, tuple)):
        return value
    return tuple(tuple(v) if isinstance(v, (list, tuple)) else v
                 for v in value)


def _lr_steps(value) -> bool:
    return value is None or (
        isinstance(value, (list, tuple)) and len(value) >= 2
        and all(map(is_int, value)) and value[0] == 0
        and all(b > a for a, b in zip(value, value[1:])))


def is_multigrid_hook(hook_cfg: dict) -> bool:
    """Whether a ``custom_hooks`` entry builds ``MultigridHook``.

    Args:
        hook_cfg (dict): One entry of a config's ``custom_hooks``.

    Returns:
        bool: True for ``type='mmext.MultigridHook'`` (or the class, or the
        name without the scope).
    """
    return type_name(hook_cfg['type']) == 'MultigridHook'


def build_hook(cfg):
    """The ``MultigridHook`` of a config's ``custom_hooks``, built as the
    runner builds it (its ``__init__`` checks every option).

    Args:
        cfg (Config): A full config.

    Returns:
        MultigridHook: The hook of the first ``MultigridHook`` entry (its
        ``priority`` dropped).

    Raises:
        ValueError: Without such a hook, or for a bad option value.
        TypeError: For an unknown option (naming the option meant:
            :mod:`mmext.registry`).
    """
    entries = [h for h in cfg.get('custom_hooks', []) if is_multigrid_hook(h)]
    if not entries:
        raise ValueError('The config has no mmext.MultigridHook in '
                         'custom_hooks.')
    entry = dict(entries[0])
    entry.pop('priority', None)
    return HOOKS.build(entry)


# What replaces a dataset wrapper around the train set (the hook rebuilds
# the video dataset's pipeline per shape).
_WRAPPER_FIXES = {
    'RepeatDataset': 'multiply max_epochs and milestones by its times',
    'ConcatDataset': 'list the clips of all in one ann_file instead',
}


@dataclass(frozen=True)
class MultigridOptions:
    """The options of ``MultigridHook`` that shape the schedule, checked here,
    once; sequences are stored as tuples.

    Their meaning: :class:`~mmext.multigrid.MultigridHook`'s docstring and
    docs/en/multigrid.md. The options that do nothing in the run
    (:meth:`unused_options`) are not checked: a value other than the
    default warns, and the default is kept.

    Args:
        long_cycle (bool): Cycle the coarse shapes of the long cycle inside
            each LR stage. Defaults to True.
        short_cycle (bool): Alternate smaller crops iteration by iteration.
            Defaults to True.
        epoch_factor (float): Multigrid epochs per recipe epoch, > 0.
            Defaults to 1.5 (the paper's).
        long_cycle_factors (tuple[tuple[float, float]]): ``(t, s)`` factors
            of the clip length and crop size in (0, 1], coarse to fine, ending
            ``(1, 1)``. Defaults to
            :data:`~mmext.multigrid.schedule.DEFAULT_LONG_CYCLE_FACTORS`.
        short_cycle_factors (tuple[float]): Crop size factors in (0, 1).
            Defaults to
            :data:`~mmext.multigrid.schedule.DEFAULT_SHORT_CYCLE_FACTORS`.
        short_cycle_mode (str): ``'absolute'`` (factors of the recipe's crop
            size, PySlowFast) or ``'relative'`` (of the current crop size).
            Defaults to ``'absolute'``.
        bn_base_size (int, optional): Clips per sub-BN split of the larger
            batches (PySlowFast ``BN.NUM_SPLITS``); None or 0: no split.
            Defaults to 8.
        lr_steps (tuple[int], optional): LR stage starts in recipe epochs,
            increasing from 0; None: from the recipe's ``MultiStepLR``.
            Defaults to None.
        lr_rule (str): How the LR follows the long-cycle batch factor: a key
            of :data:`mmext.options.LR_RULES`. Defaults to ``'linear'``.
        batch_policy (str): A key of
            :data:`~mmext.multigrid.schedule.BATCH_POLICIES`. Defaults to
            ``'paper'``.

    Raises:
        ValueError: Naming the option, what it must be and the value; or with
            both cycles off (nothing to cycle).
    """
    long_cycle: bool = True
    short_cycle: bool = True
    epoch_factor: float = 1.5
    long_cycle_factors: Tuple[Tuple[float, float],
                              ...] = DEFAULT_LONG_CYCLE_FACTORS
    short_cycle_factors: Tuple[float, ...] = DEFAULT_SHORT_CYCLE_FACTORS
    short_cycle_mode: str = 'absolute'
    bn_base_size: Optional[int] = 8
    lr_steps: Optional[Tuple[int, ...]] = None
    lr_rule: str = 'linear'
    batch_policy: str = 'paper'

    # The fields of build_multigrid_schedule (the epoch and batch axes).
    SCHEDULE_FIELDS = ('long_cycle', 'short_cycle', 'epoch_factor',
                       'long_cycle_factors', 'short_cycle_factors',
                       'short_cycle_mode', 'batch_policy')

    def __post_init__(self):
        for name in ('long_cycle', 'short_cycle'):
            value = getattr(self, name)
            check_option(isinstance(value, bool), name, value, 'a bool')
        if not (self.long_cycle or self.short_cycle):
            raise ValueError('long_cycle and short_cycle are both False: '
                             'nothing to cycle.')
        defaults = {f.name: f.default for f in fields(self)}
        for name, cause in self.unused_options().items():
            if _as_tuples(getattr(self, name)) != defaults[name]:
                warn(f'{name}={getattr(self, name)!r} has no effect with '
                     f'{cause}; remove it.')
            object.__setattr__(self, name, defaults[name])
        factor = self.epoch_factor
        check_option(is_number(factor) and factor > 0, 'epoch_factor',
                     factor, 'a number > 0')
        check_option(_long_cycle_factors(self.long_cycle_factors),
                     'long_cycle_factors', self.long_cycle_factors,
                     '(t, s) pairs in (0, 1], coarse to fine, ending (1, 1)')
        crops = self.short_cycle_factors
        check_option(
            isinstance(crops, (list, tuple)) and bool(crops) and all(
                is_number(f) and 0 < f < 1 for f in crops),
            'short_cycle_factors', crops, 'factors in (0, 1)')
        for name, values in (('short_cycle_mode', SHORT_CYCLE_MODES),
                             ('lr_rule', LR_RULES),
                             ('batch_policy', tuple(BATCH_POLICIES))):
            check_option(getattr(self, name) in values, name,
                         getattr(self, name), ' or '.join(map(repr, values)))
        base = self.bn_base_size
        check_option(base is None or is_int(base, 0),
                     'bn_base_size', base, 'None or an int >= 0')
        check_option(_lr_steps(self.lr_steps), 'lr_steps', self.lr_steps,
                     'None or increasing epochs from 0')
        for name in ('long_cycle_factors', 'short_cycle_factors',
                     'lr_steps'):
            object.__setattr__(self, name, _as_tuples(getattr(self, name)))

    def unused_options(self) -> Dict[str, str]:
        """The options that do nothing in this run, each with the setting
        that makes it so.

        Those of a disabled cycle: ``short_cycle_factors`` and
        ``short_cycle_mode`` with ``short_cycle=False``;
        ``long_cycle_factors`` and ``lr_rule`` (the LR follows the
        long-cycle batch factor) with ``long_cycle=False``. And ``lr_rule``
        under ``batch_policy='constant'``, where every batch factor is 1.

        Returns:
            dict[str, str]: Option name -> the setting, e.g.
            ``{'short_cycle_mode': 'short_cycle=False'}``.
        """
        unused = {}
        if not self.short_cycle:
            unused.update(dict.fromkeys(
                ('short_cycle_factors', 'short_cycle_mode'),
                'short_cycle=False'))
        if self.batch_policy == 'constant':
            unused['lr_rule'] = "batch_policy='constant'"
        if not self.long_cycle:
            unused.update(dict.fromkeys(('long_cycle_factors', 'lr_rule'),
                                        'long_cycle=False'))
        return unused

    def schedule_kwargs(self) -> dict:
        """The options that shape the schedule, as keyword arguments.

        Returns:
            dict: :attr:`SCHEDULE_FIELDS` and their values, the keyword
            arguments of :func:`~mmext.multigrid.build_multigrid_schedule`.
        """
        return {name: getattr(self, name) for name in self.SCHEDULE_FIELDS}


# ------------------------------------------------ the recipe's schedulers
def find_lr_steps(schedulers: Sequence[dict],
                  max_epochs: int) -> Tuple[List[int], Optional[float]]:
    """LR stage starts and decay of a recipe's ``param_scheduler``.

    Args:
        schedulers (Sequence[dict]): The recipe's ``param_scheduler``.
        max_epochs (int): The recipe's ``train_cfg.max_epochs``.

    Returns:
        tuple[list[int], float | None]: ``([0] + sorted milestones inside
        (0, max_epochs), gamma)`` of the epoch-based LR ``MultiStepLR``, else
        ``([0, max_epochs], None)``.
    """
    for s in schedulers:
        if type_name(s['type']) in STEP_TYPES and s.get(
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
        epoch_map (callable): Recipe epoch (float) -> multigrid epoch.
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
    """The iterations one grid shape of a stage's short cycle trains.

    Attributes:
        stage (MultigridStage): The stage.
        shape (GridShape): The shape.
        batch_size (int): Dataset indices per process and iteration.
        sub_bn_splits (int): Sub-BN splits of its batch.
        iters (int): Its iterations over the whole stage.
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
            (naming the recipe values it cannot honour). The methods that
            need exact counts need ``samples_per_rank`` (:attr:`exact`).
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
        check_field_of_view(pipeline)
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
            self.stages: List[MultigridStage] = _build(
                self, self.recipe_epochs, self.lr_steps)
        except ValueError as error:
            message = str(error)
            if isinstance(error, NoBaseShapeEpoch):
                message = message.replace('raise either.',
                                          _longer_schedule(self))
            # A dropped recipe value is often the cause (a shortened run).
            dropped = recipe_scheduler_warnings(self)
            if dropped:
                message += (f' Recipe values the schedule cannot honour: '
                            f'{" ".join(dropped)}')
            if message == str(error):
                raise
            raise ValueError(message) from error
        _check_sub_bn(self)
        # (T, S) -> FLOPs of one clip's forward, counted by the caller of a
        # model check (checks.check_run).
        self.clip_flops: Optional[Dict[Tuple[int, int], float]] = None
        self.cum_iters: Optional[List[int]] = None
        if samples_per_rank is not None:
            self.cum_iters = _count_iterations(self)

    @classmethod
    def from_config(cls, cfg, samples_per_rank: Optional[int] = None,
                    world_size: int = 1,
                    recipe_iters_per_epoch: Optional[int] = None,
                    options: Optional[MultigridOptions] = None,
                    clips_per_sample: Optional[int] = None
                    ) -> 'MultigridPlan':
        """Plan of a full mmaction2 config.

        The epoch-based loop is checked here, once: the hook and the schedule
        tool plan through this method.

        Args:
            cfg (Config): The config (``train_cfg``, ``train_dataloader``,
                ``param_scheduler``, ``optim_wrapper``).
            samples_per_rank (int, optional): As in the constructor. Defaults
                to None (estimated counts).
            world_size (int): As in the constructor. Defaults to 1.
            recipe_iters_per_epoch (int, optional): As in the constructor.
                Defaults to None.
            options (MultigridOptions, optional): Defaults to those of the
                config's ``MultigridHook`` (:func:`build_hook`).
            clips_per_sample (int, optional): Defaults to the train dataset
                config's
                (:func:`~mmext.multigrid.data.config_clips_per_sample`).

        Returns:
            MultigridPlan: The plan, its ``accumulative_counts`` from
            ``optim_wrapper``.

        Raises:
            ValueError: For a train loop without ``max_epochs``, a train
                dataset without its own pipeline, as :func:`build_hook` or as
                the constructor.
            TypeError: For an unknown ``MultigridHook`` option.
        """
        train_cfg = cfg.get('train_cfg') or {}
        if 'max_epochs' not in train_cfg:
            raise ValueError(f'MultigridHook needs an epoch-based loop, got '
                             f'train_cfg={train_cfg}')
        dataset = cfg.train_dataloader.dataset
        if 'pipeline' not in dataset:
            kind = type_name(dataset.get('type'))
            fix = _WRAPPER_FIXES.get(kind, 'configure the video dataset')
            raise ValueError(f'MultigridHook needs a pipeline in '
                             f'train_dataloader.dataset, got a {kind}; '
                             f'{fix}.')
        if options is None:
            options = build_hook(cfg).options
        if clips_per_sample is None:
            clips_per_sample = config_clips_per_sample(dataset)
        return cls(dataset.pipeline, cfg.train_dataloader.batch_size,
                   train_cfg['max_epochs'], cfg.get('param_scheduler'),
                   samples_per_rank, recipe_iters_per_epoch,
                   world_size=world_size,
                   accumulative_counts=cfg.get('optim_wrapper', {}).get(
                       'accumulative_counts', 1),
                   options=options, clips_per_sample=clips_per_sample)

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
        """int: Exact iterations of the run (an exact plan)."""
        _need_exact(self)
        return self.cum_iters[-1]

    def stage_at(self, epoch: int) -> MultigridStage:
        """The stage training a multigrid epoch.

        Args:
            epoch (int): 0-based multigrid epoch.

        Returns:
            MultigridStage: The stage whose ``[start_epoch, end_epoch)`` holds
            it.

        Raises:
            IndexError: For an epoch outside the run.
        """
        return stage_at_epoch(self.stages, epoch)

    def lr_scale(self, stage: MultigridStage) -> float:
        """Factor on the scheduled LR at every iteration of a stage.

        Args:
            stage (MultigridStage): A stage of the plan.

        Returns:
            float: Its long-cycle batch factor ``B/B0`` by ``lr_rule`` (linear:
            ``B/B0``; sqrt: its square root).
        """
        return LR_RULES[self.options.lr_rule](stage.shape.batch_factor)

    def batch_sizes(self, stage: MultigridStage,
                    short_cycle: bool = True) -> List[int]:
        """Per-process batch sizes of a stage in short-cycle order.

        Args:
            stage (MultigridStage): A stage of the plan.
            short_cycle (bool): False: the long-cycle batch only. Defaults to
                True.

        Returns:
            list[int]: Dataset indices per process and iteration, the recipe's
            ``batch_size`` times each shape's batch factor.
        """
        shapes = stage.short_cycle if short_cycle else stage.short_cycle[-1:]
        return [self.base_batch * s.batch_factor for s in shapes]

    def sub_bn_splits(self, stage: MultigridStage) -> int:
        """The most sub-BN splits of an iteration of a stage.

        Args:
            stage (MultigridStage): A stage of the plan.

        Returns:
            int: ``clips // bn_base_size`` of its largest batch (PySlowFast
            ``NUM_SPLITS``), 1 where no batch splits.
        """
        return max(_splits(self, b) for b in self.batch_sizes(stage))

    @property
    def sub_bn_base_size(self) -> Optional[int]:
        """int | None: ``bn_base_size`` if some batch of the run splits."""
        if max(self.sub_bn_splits(s) for s in self.stages) > 1:
            return self.options.bn_base_size
        return None

    def is_shape_end(self, epoch: int) -> bool:
        """Whether a multigrid epoch is the last of a long-cycle shape.

        A stage followed by one of the same shapes does not end it.

        Args:
            epoch (int): 0-based multigrid epoch.

        Returns:
            bool: True where the next epoch trains other shapes or the run
            ends.
        """
        stage = self.stage_at(epoch)
        if epoch + 1 != stage.end_epoch:
            return False
        following = self.stages.index(stage) + 1
        return following >= len(self.stages) or (
            self.stages[following].short_cycle != stage.short_cycle)

    # ------------------------------------------------------------ counts
    def shape_iterations(self) -> List[ShapeIterations]:
        """Iterations of every grid shape of every stage (an exact plan).

        Returns:
            list[ShapeIterations]: In training order, one per shape of each
            stage's short cycle; the epoch's iterations go round the cycle, the
            first shapes taking the remainder.

        Raises:
            ValueError: For a plan built without ``samples_per_rank``.
        """
        out = []
        for stage in self.stages:
            n = self.iters_per_epoch(stage)
            cycle = stage.short_cycle
            for k, (shape, batch) in enumerate(
                    zip(cycle, self.batch_sizes(stage))):
                per_epoch = n // len(cycle) + (k < n % len(cycle))
                out.append(ShapeIterations(
                    stage, shape, batch, _splits(self, batch),
                    per_epoch * stage.num_epochs))
        return out

    def iters_per_epoch(self, stage: MultigridStage) -> int:
        """Exact iterations of one epoch of a stage (an exact plan).

        Args:
            stage (MultigridStage): A stage of the plan.

        Returns:
            int: Full batches of ``samples_per_rank`` indices, going round the
            short cycle's batch sizes
            (:func:`~mmext.multigrid.schedule.iterations_per_epoch`).

        Raises:
            ValueError: For a plan built without ``samples_per_rank``.
        """
        _need_exact(self)
        return iterations_per_epoch(self.samples_per_rank,
                                    self.batch_sizes(stage))

    def iter_at(self, epoch: float) -> int:
        """Iterations done at a multigrid epoch (an exact plan).

        Args:
            epoch (float): Multigrid epoch, fractional inside an epoch (linear
                between its ends); clamped to the run.

        Returns:
            int: Iterations done, rounded.

        Raises:
            ValueError: For a plan built without ``samples_per_rank``.
        """
        _need_exact(self)
        cum = self.cum_iters
        k = min(max(int(math.floor(epoch)), 0), len(cum) - 2)
        return int(round(cum[k] + (epoch - k) * (cum[k + 1] - cum[k])))

    def recipe_epoch_to_multigrid(self, epoch: float) -> float:
        """Multigrid epoch of a recipe epoch.

        Args:
            epoch (float): Recipe epoch, possibly fractional.

        Returns:
            float: The multigrid epoch at the same point of the LR schedule
            (:func:`~mmext.multigrid.schedule.map_recipe_epoch`).
        """
        return map_recipe_epoch(self.stages, self.lr_steps,
                                self.recipe_epochs, epoch)

    def multigrid_epochs(self, recipe_epochs: Iterable[int]) -> List[int]:
        """Where epoch counts of the recipe end on the multigrid axis.

        Args:
            recipe_epochs (Iterable[int]): Recipe epochs, e.g. its validation
                epochs.

        Returns:
            list[int]: Their multigrid epochs rounded half up, in ``[1,
            max_epochs]``, distinct, ascending.
        """
        return sorted({
            min(max(math.floor(self.recipe_epoch_to_multigrid(r) + 0.5), 1),
                self.max_epochs) for r in recipe_epochs})

    def scheduler_cfgs(self) -> List[dict]:
        """The recipe's ``param_scheduler`` on the multigrid axis (an exact
        plan).

        Returns:
            list[dict]: New scheduler configs (:func:`remap_param_schedulers`).

        Raises:
            ValueError: For a plan built without ``samples_per_rank``.
        """
        _need_exact(self)
        return remap_param_schedulers(
            self.param_scheduler, self.recipe_epoch_to_multigrid,
            self.iter_at, self.recipe_iters_per_epoch)

    # ------------------------------------------------------------ savings
    @property
    def flops_counted(self) -> bool:
        """bool: Whether :attr:`clip_flops` holds every shape of the run."""
        return self.clip_flops is not None and {
            (x.clip_len, x.crop_size) for s in self.stages
            for x in s.short_cycle} <= set(self.clip_flops)

    def flops_ratio(self) -> float:
        """Multigrid training FLOPs over the recipe's.

        Returns:
            float: The sum of the stages' ratios, from :attr:`clip_flops` if
            :attr:`flops_counted`, else with FLOPs ~ ``B T S^2``
            (:func:`~mmext.multigrid.schedule.stage_flops_ratios`).
        """
        return sum(stage_flops_ratios(
            self.stages, self.recipe_epochs, self.base_clip_len,
            self.base_crop_size, self.clip_flops))

    def iteration_saving(self) -> float:
        """Recipe iterations over multigrid iterations.

        Returns:
            float: > 1 is a saving; exact with ``samples_per_rank``, else from
            the stages' estimated iterations (in recipe iterations per epoch).
        """
        if self.exact:
            return (self.recipe_epochs * self.recipe_iters_per_epoch /
                    self.max_iters)
        return self.recipe_epochs / sum(s.estimated_iters
                                        for s in self.stages)


# ------------------------------------------- what the plan cannot honour
def _need_exact(plan: MultigridPlan) -> None:
    """Refuse an exact count from a plan built without ``samples_per_rank``
    (whose counts are estimates: :attr:`MultigridPlan.exact`)."""
    if plan.samples_per_rank is None:
        raise ValueError('exact iteration counts need samples_per_rank '
                         '(None): pass len(sampler)')


def _build(plan: MultigridPlan, max_epochs: int,
           lr_steps: Sequence[int]) -> List[MultigridStage]:
    """The stages of the plan's recipe and options for ``max_epochs``
    recipe epochs and LR stages ``lr_steps``."""
    return build_multigrid_schedule(
        plan.base_clip_len, plan.base_crop_size, lr_steps, max_epochs,
        gamma=plan.gamma, lr_rule=plan.options.lr_rule,
        **plan.options.schedule_kwargs())


def _longer_schedule(plan: MultigridPlan) -> str:
    """The fix of a recipe too short for the cycles' stages: the shortest
    longer ``max_epochs`` whose schedule keeps the base shape, the LR stages
    from the recipe's schedulers at it (epochs are rounded per stage, so
    not every longer one does)."""
    for epochs in range(plan.recipe_epochs + 1, 4 * plan.recipe_epochs + 99):
        steps = list(plan.options.lr_steps or find_lr_steps(
            plan.param_scheduler, epochs)[0])
        try:
            if steps[-1] <= epochs and _build(plan, epochs, steps):
                return (f'use train_cfg.max_epochs={epochs} (the shortest '
                        f'longer one that keeps it) or raise epoch_factor.')
        except NoBaseShapeEpoch:
            continue
    return 'raise epoch_factor.'


def _splits(plan: MultigridPlan, batch: int) -> int:
    """Sub-BN splits of ``batch`` indices (PySlowFast ``NUM_SPLITS``)."""
    clips, base = batch * plan.clips_per_sample, plan.options.bn_base_size
    return clips // base if base and clips > base else 1


def _check_sub_bn(plan: MultigridPlan) -> None:
    """Raise unless every batch above ``bn_base_size`` clips is a multiple
    of it."""
    base = plan.options.bn_base_size
    if not base:
        return
    clips = [[b * plan.clips_per_sample for b in plan.batch_sizes(stage)]
             for stage in plan.stages]
    for stage, batches in zip(plan.stages, clips):
        bad = [b for b in batches if b > base and b % base]
        if not bad:
            continue
        # The largest size that splits every batch of the run.
        size = max(d for d in range(1, base)
                   if all(b <= d or b % d == 0 for c in clips for b in c))
        raise ValueError(
            f'bn_base_size={base} cannot split the batch of {bad[0]} clips '
            f'(epochs {stage.start_epoch}-{stage.end_epoch}); use '
            f'bn_base_size={size if size > 1 else None}.')


def _count_iterations(plan: MultigridPlan) -> List[int]:
    """Cumulative iterations at each multigrid epoch; raise for a stage
    whose first batch exceeds the clips per process."""
    samples, cum = plan.samples_per_rank, [0]
    # Whether every long-cycle batch fits: short_cycle=False then trains.
    long_fits = plan.options.short_cycle and all(
        plan.batch_sizes(s, short_cycle=False)[0] <= samples
        for s in plan.stages)
    for stage in plan.stages:
        n = plan.iters_per_epoch(stage)
        sizes = plan.batch_sizes(stage)
        factors = plan.options.short_cycle_factors
        if (n == 0 and sizes[-1] <= samples
                and factors != DEFAULT_SHORT_CYCLE_FACTORS):
            # The shape's own batch fits: the short cycle's made the first.
            raise ValueError(
                f'short_cycle_factors {list(factors)} make a batch of '
                f'{sizes[0]} > {samples} clips per process; use ' +
                'short_cycle=False or ' * long_fits + 'factors closer to 1.')
        if n == 0:
            fixes = ['more data'] + ['fewer processes'] * (
                plan.world_size > 1) + ['a smaller batch_size'] + [
                    'short_cycle=False'] * long_fits
            raise ValueError(
                f'{samples} clips per process < batch {sizes[0]} (epochs '
                f'{stage.start_epoch}-{stage.end_epoch}); use '
                f'{", ".join(fixes[:-1])} or {fixes[-1]}.')
        cum += [cum[-1] + n * (k + 1) for k in range(stage.num_epochs)]
    return cum


def recipe_scheduler_warnings(plan: MultigridPlan) -> List[str]:
    """Recipe LR scheduler values the run cannot honour.

    Any run's rules (:func:`~mmext.scheduler_checks.unused_scheduler_values`)
    on the recipe's axis, milestones that make no LR stages, a warm-up longer
    than the first LR stage.

    Args:
        plan (MultigridPlan): The plan.

    Returns:
        list[str]: One message per value, each naming the fix; empty if all
        are honoured.
    """
    lr = [s for s in plan.param_scheduler
          if s.get('param_name', 'lr') == 'lr']
    per_epoch = plan.recipe_iters_per_epoch
    messages = unused_scheduler_values(
        lr, plan.recipe_epochs,
        plan.recipe_epochs * per_epoch if per_epoch else None,
        axis='recipe')
    first_stage = plan.lr_steps[1]
    for s in lr:
        kind = type_name(s['type'])
        name = f'param_scheduler {s["type"]}'
        if kind in STEP_TYPES and not plan.options.lr_steps:
            early = [m for m in s.get('milestones', []) if m <= 0]
            if not s.get('by_epoch', True):
                messages.append(f'{name} with by_epoch=False makes no '
                                f'multigrid LR stages; use by_epoch=True or '
                                f'lr_steps.')
            elif early:
                messages.append(f'{name} milestones {early} make no '
                                f'multigrid LR stage (stages start at '
                                f'{plan.lr_steps}).')
        elif kind in WARMUP_TYPES and s.get('begin', 0) == 0:
            end = s.get('end', SCHEDULER_INF)
            if end != SCHEDULER_INF and not s.get('by_epoch', True):
                end = end / per_epoch if per_epoch else SCHEDULER_INF
            if first_stage < end <= plan.recipe_epochs:
                messages.append(
                    f'{name} (warm-up) ends at recipe epoch {end:g}, after '
                    f'the first LR stage [0, {first_stage}): shorten it.')
    return messages
