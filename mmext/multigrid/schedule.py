"""The multigrid schedule: pure functions, no runner, no torch.

Wu et al., "A Multigrid Method for Efficiently Training Video Models" (CVPR
2020, arXiv 1912.00998), Sec. 3, and PySlowFast
``slowfast/utils/multigrid.py`` (``MultigridSchedule.get_long_cycle_schedule``,
``init_multigrid``). Epochs are data epochs, clip lengths frames, crop sizes
pixels."""
import bisect
import math
from dataclasses import asdict, dataclass
from typing import List, Mapping, Optional, Sequence, Tuple

from mmext.options import LR_RULES

__all__ = [
    'MultigridStage', 'GridShape', 'build_multigrid_schedule',
    'short_cycle_shapes', 'long_cycle_sizes', 'long_cycle_shapes',
    'stage_at_epoch',
    'map_recipe_epoch', 'iterations_per_epoch', 'stage_flops_ratios',
    'DEFAULT_LONG_CYCLE_FACTORS', 'DEFAULT_SHORT_CYCLE_FACTORS',
    'BATCH_POLICIES'
]

DEFAULT_LONG_CYCLE_FACTORS = ((0.25, 0.5**0.5), (0.5, 0.5**0.5), (0.5, 1),
                              (1, 1))
DEFAULT_SHORT_CYCLE_FACTORS = (0.5, 0.5**0.5)
SHORT_CYCLE_MODES = ('absolute', 'relative')
# How a shape's batch follows the paper's batch factor F = T0 S0^2 / (T S^2):
# 'paper' B0 F (a step's FLOPs stay the base step's, paper Sec. 3.1),
# 'sqrt' B0 round(sqrt F), 'constant' B0 (each step cheaper, the recipe's
# steps per epoch; Composer's progressive resizing, FFCV's low-res training).
BATCH_POLICIES = {
    'paper': lambda factor: factor,
    'sqrt': lambda factor: max(1, int(round(math.sqrt(factor)))),
    'constant': lambda factor: 1,
}


class NoBaseShapeEpoch(ValueError):
    """The rounded schedule leaves no epoch at the base shape (a recipe too
    short for the cycles' stages)."""


@dataclass(frozen=True)
class GridShape:
    """One mini-batch shape ``(B, T, S)`` of a clip tensor ``(N, C, T, S, S)``.

    Attributes:
        batch_factor (int): ``B`` as a multiple of the recipe's batch size
            (the ``batch_policy``'s of the paper's factor).
        clip_len (int): ``T``, frames.
        crop_size (int): ``S``, pixels (square crops).
    """
    batch_factor: int
    clip_len: int
    crop_size: int


@dataclass(frozen=True)
class MultigridStage:
    """A run of epochs trained at one long-cycle grid shape.

    Attributes:
        lr_stage (int): Index of the recipe's LR stage.
        shape (GridShape): Long-cycle shape.
        short_cycle (tuple[GridShape]): Shapes cycled iteration by iteration
            (``(shape,)`` without the short cycle).
        start_epoch (int): First multigrid epoch of the stage.
        end_epoch (int): Its end epoch (exclusive).
        lr_factor (float): LR relative to the recipe's base LR,
            ``LR_RULES[lr_rule](batch_factor) * gamma ** lr_stage``
            (PySlowFast ``SOLVER.LRS`` with the linear rule).
        fine_tune (bool): Whether the stage is (a half of) the final
            fine-tune at the base shape.
    """
    lr_stage: int
    shape: GridShape
    short_cycle: Tuple[GridShape, ...]
    start_epoch: int
    end_epoch: int
    lr_factor: float
    fine_tune: bool = False

    @property
    def num_epochs(self) -> int:
        """int: Epochs of the stage, ``end_epoch - start_epoch``."""
        return self.end_epoch - self.start_epoch

    @property
    def estimated_iters(self) -> float:
        """float: Iterations of the stage in recipe iterations per epoch
        (incomplete batches ignored)."""
        cycle = self.short_cycle
        return self.num_epochs * len(cycle) / sum(x.batch_factor
                                                  for x in cycle)

    def to_dict(self) -> dict:
        """The stage as a plain dict (the ``--json`` format of the schedule
        tool).

        Returns:
            dict: The fields, the long-cycle shape's as ``batch_factor``,
            ``clip_len`` and ``crop_size``, the short cycle as a list of dicts.
        """
        d = asdict(self)
        d.pop('shape')
        d.update(
            batch_factor=self.shape.batch_factor,
            clip_len=self.shape.clip_len,
            crop_size=self.shape.crop_size,
            short_cycle=[asdict(s) for s in self.short_cycle])
        return d


def _batch_factor(base_t: int, base_s: int, t: float, s: float) -> int:
    """``B = round(T0 S0^2 / (T S^2))`` (paper Sec. 3.1, PySlowFast)."""
    return int(round(base_t * base_s**2 / (t * s * s)))


def short_cycle_shapes(base_t: int, base_s: int, clip_len: int,
                       crop_size: int, factors: Sequence[float],
                       mode: str, batch_policy: str = 'paper'
                       ) -> Tuple[GridShape, ...]:
    """The short cycle of one long-cycle shape, in iteration order.

    The small crops of ``factors``, then the long-cycle crop, all of
    ``clip_len`` frames (paper Sec. 3.2). The batch factor uses the
    unrounded crop size (PySlowFast), the crop the rounded one.

    Args:
        base_t (int): Recipe clip length ``T0`` (frames).
        base_s (int): Recipe crop size ``S0`` (pixels).
        clip_len (int): The long-cycle shape's clip length ``T`` (frames).
        crop_size (int): The long-cycle shape's crop size ``S`` (pixels).
        factors (Sequence[float]): Crop size factors in (0, 1).
        mode (str): ``'absolute'``: crops are ``factor * S0`` (PySlowFast);
            ``'relative'``: ``factor * S`` (the paper's text).
        batch_policy (str): A key of :data:`BATCH_POLICIES`. Defaults to
            ``'paper'``.

    Returns:
        tuple[GridShape]: ``len(factors) + 1`` shapes, the long-cycle shape
        last.
    """
    ref = base_s if mode == 'absolute' else crop_size
    # The batch factor uses the unrounded size (PySlowFast), the crop the
    # rounded one.
    return tuple(
        _shape(base_t, base_s, clip_len, s, batch_policy)
        for s in [ref * f for f in factors] + [crop_size])


def _shape(base_t: int, base_s: int, t: int, s: float,
           batch_policy: str) -> GridShape:
    factor = BATCH_POLICIES[batch_policy](_batch_factor(base_t, base_s, t, s))
    return GridShape(factor, t, int(round(s)))


def long_cycle_sizes(base_t: int, base_s: int,
                     factors: Sequence[Tuple[float, float]]
                     ) -> List[Tuple[int, int]]:
    """The clip sizes of long-cycle factors (PySlowFast
    ``MULTIGRID.DEFAULT_S``).

    Args:
        base_t (int): Recipe clip length ``T0`` (frames).
        base_s (int): Recipe crop size ``S0`` (pixels).
        factors (Sequence[tuple[float, float]]): ``(t, s)`` factors.

    Returns:
        list[tuple[int, int]]: ``(T, S) = (round(t T0), round(s S0))`` of each
        factor, in frames and pixels.
    """
    return [(int(round(base_t * t)), int(round(base_s * s)))
            for t, s in factors]


def long_cycle_shapes(base_t: int, base_s: int,
                      factors: Sequence[Tuple[float, float]],
                      batch_policy: str = 'paper') -> List[GridShape]:
    """The long-cycle shapes of ``(t, s)`` factors of ``(T0, S0)``.

    Args:
        base_t (int): Recipe clip length ``T0`` (frames).
        base_s (int): Recipe crop size ``S0`` (pixels).
        factors (Sequence[tuple[float, float]]): ``(t, s)`` factors
            (:func:`long_cycle_sizes`).
        batch_policy (str): A key of :data:`BATCH_POLICIES`. Defaults to
            ``'paper'``.

    Returns:
        list[GridShape]: One shape per factor, the batch factor
        ``round(T0 S0^2 / (T S^2))`` (paper Sec. 3.1) by ``batch_policy``.
    """
    return [_shape(base_t, base_s, t, s, batch_policy)
            for t, s in long_cycle_sizes(base_t, base_s, factors)]


def build_multigrid_schedule(
        base_t: int,
        base_s: int,
        lr_steps: Sequence[int],
        max_epochs: int,
        long_cycle: bool = True,
        short_cycle: bool = True,
        long_cycle_factors: Sequence[Tuple[float, float]] = (
            DEFAULT_LONG_CYCLE_FACTORS),
        short_cycle_factors: Sequence[float] = DEFAULT_SHORT_CYCLE_FACTORS,
        epoch_factor: float = 1.5,
        short_cycle_mode: str = 'absolute',
        gamma: Optional[float] = None,
        lr_rule: str = 'linear',
        batch_policy: str = 'paper') -> List[MultigridStage]:
    """Turn a recipe's schedule into the multigrid stages.

    Long cycle (PySlowFast ``get_long_cycle_schedule``): inside every LR
    stage each long-cycle shape gets the same number of iterations at the
    paper's batch (so the same epochs under every ``batch_policy``). The last
    LR stage is a fine-tune at the base shape with the same iteration
    saving, its first half at the previous stage's LR (``init_multigrid``).
    Epochs are rescaled to sum to ``max_epochs * epoch_factor`` and rounded
    cumulatively. Short cycle only: every boundary is multiplied by
    ``epoch_factor`` and truncated (``init_multigrid``).

    Args:
        base_t (int): Recipe clip length ``T0`` (frames).
        base_s (int): Recipe crop size ``S0`` (pixels).
        lr_steps (Sequence[int]): LR stage starts in recipe epochs
            (``[0] + milestones``; ``[0, max_epochs]``: no fine-tune).
        max_epochs (int): Recipe's ``train_cfg.max_epochs``.
        long_cycle (bool): Cycle the long-cycle shapes inside each LR stage.
            Defaults to True.
        short_cycle (bool): Alternate the short-cycle crop sizes
            iteration by iteration. Defaults to True.
        long_cycle_factors (Sequence[tuple[float, float]]): ``(t, s)``
            factors of the clip length and crop size, coarsest first.
            Defaults to :data:`DEFAULT_LONG_CYCLE_FACTORS`.
        short_cycle_factors (Sequence[float]): Crop size factors of the
            short cycle. Defaults to :data:`DEFAULT_SHORT_CYCLE_FACTORS`.
        epoch_factor (float): Multigrid epochs per recipe epoch. Defaults to
            1.5.
        short_cycle_mode (str): ``'absolute'`` (factors of ``S0``) or
            ``'relative'`` (of the stage's crop size). Defaults to
            ``'absolute'``.
        lr_rule (str): How the LR follows the batch factor: a key of
            :data:`mmext.options.LR_RULES`. Defaults to ``'linear'``.
        batch_policy (str): A key of :data:`BATCH_POLICIES` (``'paper'``,
            ``'sqrt'``, ``'constant'``); the epochs are the paper's under
            every policy. Defaults to ``'paper'``.
        gamma (float, optional): Step decay of the recipe, only used for the
            reported ``lr_factor``.

    Returns:
        list[MultigridStage]: Stages in order, contiguous from epoch 0;
        stages rounded to zero epochs are dropped.

    Raises:
        ValueError: If ``lr_steps`` go past ``max_epochs`` or a factor of a
            cycle that runs gives a shape of no frame or pixel;
            :class:`NoBaseShapeEpoch` if the
            rounded schedule has no epoch at the base shape.
    """
    _check_factors(base_t, base_s, long_cycle_factors if long_cycle else (),
                   short_cycle_factors if short_cycle else ())
    steps = list(lr_steps)
    if steps[-1] > max_epochs:
        raise ValueError(f'lr_steps {steps} must end within '
                         f'train_cfg.max_epochs={max_epochs}.')
    decay = 1.0 if gamma is None else gamma

    def cycle(shape: GridShape, policy: str = 'paper'
              ) -> Tuple[GridShape, ...]:
        t, s = shape.clip_len, shape.crop_size
        if short_cycle:
            return short_cycle_shapes(base_t, base_s, t, s,
                                      short_cycle_factors, short_cycle_mode,
                                      policy)
        return (_shape(base_t, base_s, t, s, policy), )

    def stage(lr_stage, c, start, end, fine_tune=False) -> MultigridStage:
        c = cycle(c[-1], batch_policy)
        return MultigridStage(
            lr_stage, c[-1], c, start, end,
            LR_RULES[lr_rule](c[-1].batch_factor) * decay**lr_stage,
            fine_tune)

    base_cycle = cycle(GridShape(1, base_t, base_s))
    if not long_cycle:
        bounds = [int(x * epoch_factor) for x in steps + [max_epochs]]
        return [stage(i, base_cycle, a, b)
                for i, (a, b) in enumerate(zip(bounds, bounds[1:])) if b > a]

    # Epochs are allotted at the paper's batches, whatever batch_policy.
    cycles = [cycle(x) for x in long_cycle_shapes(
        base_t, base_s, long_cycle_factors)]
    avg_bs = [sum(x.batch_factor for x in c) / len(c) for c in cycles]
    # (lr_stage, cycle, unscaled epochs); equal iterations per shape.
    raw = []
    for i, (a, b) in enumerate(zip(steps, steps[1:])):
        raw += [(i, c, (b - a) * bs / sum(avg_bs))
                for c, bs in zip(cycles, avg_bs)]
    total_iters = sum(e / avg_bs[k % len(cycles)] for k, (_, _, e) in
                      enumerate(raw))
    iter_saving = steps[-1] / total_iters if total_iters else 1.0
    ft_epochs = (max_epochs - steps[-1]) / iter_saving * avg_bs[-1]
    last = len(steps) - 1
    # The fine-tune (at the base shape, not at cycles[-1], which is only the
    # base shape if long_cycle_factors ends with (1, 1)) is split in halves.
    raw += [(last - 1, base_cycle, ft_epochs / 2),
            (last, base_cycle, ft_epochs / 2)]
    scale = max_epochs * epoch_factor / sum(e for _, _, e in raw)

    stages, cum, start = [], 0.0, 0
    for k, (lr_stage, c, epochs) in enumerate(raw):
        cum += epochs * scale
        end = int(round(cum))
        if k == len(raw) - 2:
            # PySlowFast: the LR drop is at (start_ft + end) // 2.
            total = int(round(max_epochs * epoch_factor))
            end = (start + total) // 2
        if end > start:
            stages.append(stage(lr_stage, c, start, end,
                                fine_tune=k >= len(raw) - 2))
        start = max(start, end)
    if not stages or stages[-1].shape != GridShape(1, base_t, base_s):
        raise NoBaseShapeEpoch(
            f'epoch_factor={epoch_factor} with {max_epochs} recipe epochs '
            f'leaves no epoch at the base shape; raise either.')
    return stages


def _check_factors(base_t: int, base_s: int,
                   long_cycle_factors: Sequence[Tuple[float, float]],
                   short_cycle_factors: Sequence[float]) -> None:
    """Raise ``ValueError`` for factors that round a shape of this recipe to
    no frame or pixel."""
    for (t, s), sizes in zip(long_cycle_factors, long_cycle_sizes(
            base_t, base_s, long_cycle_factors)):
        if base_t == 1 and t < 1:
            raise ValueError(f'long_cycle_factors entry {(t, s)} leaves 0 '
                             f'frames of T=1: 2D models need t = 1 in '
                             f'every entry.')
        if min(sizes) < 1:
            raise ValueError(f'long_cycle_factors entry {(t, s)} leaves 0 '
                             f'frames or pixels of (T, S) = ({base_t}, '
                             f'{base_s}).')
    small = [f for f in short_cycle_factors if round(base_s * f) < 1]
    if small:
        raise ValueError(f'short_cycle_factors {small} leave 0 pixels of S='
                         f'{base_s}.')


def stage_at_epoch(stages: Sequence[MultigridStage],
                   epoch: int) -> MultigridStage:
    """The stage that trains a multigrid epoch.

    Args:
        stages (Sequence[MultigridStage]): Contiguous stages from epoch 0.
        epoch (int): 0-based multigrid epoch.

    Returns:
        MultigridStage: The stage whose ``[start_epoch, end_epoch)`` holds it.

    Raises:
        IndexError: For an epoch outside the schedule.
    """
    ends = [s.end_epoch for s in stages]
    k = bisect.bisect_right(ends, epoch)
    if epoch < 0 or k >= len(stages):
        raise IndexError(f'epoch {epoch} is outside the schedule [0, '
                         f'{ends[-1]})')
    return stages[k]


def map_recipe_epoch(stages: Sequence[MultigridStage],
                     lr_steps: Sequence[int], max_epochs: int,
                     epoch: float) -> float:
    """The multigrid epoch of a (fractional) recipe epoch.

    Piecewise-linear through the knots ``lr_steps[i] -> start of LR stage i``
    and ``max_epochs -> end of the schedule`` (extrapolated past it), so a
    milestone lands on its multigrid LR drop and warm-up or cosine keep their
    share of each LR stage.

    Args:
        stages (Sequence[MultigridStage]): From
            :func:`build_multigrid_schedule` with ``lr_steps`` and
            ``max_epochs``.
        lr_steps (Sequence[int]): LR stage starts in recipe epochs.
        max_epochs (int): The recipe's epochs.
        epoch (float): A recipe epoch.

    Returns:
        float: The multigrid epoch.
    """
    knots = {}
    for s in stages:
        if s.lr_stage < len(lr_steps):
            knots.setdefault(lr_steps[s.lr_stage], s.start_epoch)
    knots[max_epochs] = stages[-1].end_epoch
    xs = sorted(knots)
    k = min(max(bisect.bisect_right(xs, epoch) - 1, 0), len(xs) - 2)
    x0, x1 = xs[k], xs[k + 1]
    y0, y1 = knots[x0], knots[x1]
    return y0 + (epoch - x0) * (y1 - y0) / (x1 - x0)


def iterations_per_epoch(num_samples: int, batch_sizes: Sequence[int]) -> int:
    """Iterations of one pass over a process's samples.

    Batches of the cycled ``batch_sizes``, incomplete batches dropped
    (PySlowFast's loader).

    Args:
        num_samples (int): Dataset indices per process and epoch.
        batch_sizes (Sequence[int]): Per-process batch sizes in short-cycle
            order.

    Returns:
        int: The full batches of one epoch.
    """
    cycle_len = sum(batch_sizes)
    iters = (num_samples // cycle_len) * len(batch_sizes)
    rest = num_samples % cycle_len
    for b in batch_sizes:
        if rest < b:
            break
        rest -= b
        iters += 1
    return iters


def stage_flops_ratios(stages: Sequence[MultigridStage], base_epochs: int,
                       base_t: int, base_s: int,
                       clip_flops: Optional[Mapping[Tuple[int, int],
                                                    float]] = None
                       ) -> List[float]:
    """Each stage's training FLOPs over the recipe's.

    An epoch sees every clip once, so an epoch of a stage costs the
    batch-weighted mean of its short cycle's FLOPs per clip ``F(T, S)``:
    ``ratio = epochs * sum_i(B_i F(T_i, S_i)) / sum_i(B_i)`` over
    ``base_epochs * F(T0, S0)``.

    Args:
        stages (Sequence[MultigridStage]): The schedule.
        base_epochs (int): The recipe's epochs.
        base_t (int): Recipe clip length ``T0`` (frames).
        base_s (int): Recipe crop size ``S0`` (pixels).
        clip_flops (Mapping[tuple[int, int], float], optional): ``(T, S)`` ->
            FLOPs of one clip's forward, for every shape of ``stages``; else
            (or None) ``F(T, S) = T S^2``. Defaults to None.

    Returns:
        list[float]: One ratio per stage; their sum is the run's ratio (< 1
        is a saving).
    """
    shapes = {(x.clip_len, x.crop_size) for s in stages
              for x in s.short_cycle} | {(base_t, base_s)}
    if clip_flops is None or not shapes <= set(clip_flops):
        clip_flops = {(t, s): t * s * s for t, s in shapes}
    base = base_epochs * clip_flops[base_t, base_s]
    return [s.num_epochs * sum(
        x.batch_factor * clip_flops[x.clip_len, x.crop_size]
        for x in s.short_cycle) / sum(x.batch_factor for x in s.short_cycle)
            / base for s in stages]
