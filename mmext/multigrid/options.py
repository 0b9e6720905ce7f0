"""The options of ``MultigridHook``: one frozen object, defaults and checks.

:class:`MultigridOptions` is built once (by the hook, or from a config's
hook entry by ``MultigridPlan.from_config``) and handed to
:class:`~mmext.multigrid.MultigridPlan`; nothing else writes a default or
validates an option. Checks that need the recipe's base shape (factor
ranges) are the schedule's (:func:`mmext.multigrid.build_multigrid_schedule`).
"""
import dataclasses
import numbers
from dataclasses import dataclass
from typing import Optional, Tuple

from .monitor import DATA_WAIT_THRESHOLD
from .schedule import (DEFAULT_LONG_CYCLE_FACTORS, DEFAULT_SHORT_CYCLE_FACTORS,
                       SHORT_CYCLE_MODES)

__all__ = ['MultigridOptions', 'is_multigrid_hook']


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(
        value, bool)


def _is_sequence(value) -> bool:
    return isinstance(value, (list, tuple))


def _fail(name: str, value, expected: str, example: str) -> None:
    """Raise the type error of option ``name`` (a ValueError, as every
    option error, so callers catch one kind)."""
    raise ValueError(f'MultigridHook option {name}={value!r} '
                     f'({type(value).__name__}): expected {expected}, e.g. '
                     f'{name}={example}')

# Keys of a ``custom_hooks`` entry that are not hook options.
_HOOK_CFG_KEYS = ('type', 'priority', '_scope_')


def is_multigrid_hook(hook_cfg: dict) -> bool:
    """Whether a ``custom_hooks`` entry builds ``MultigridHook``, with or
    without the ``mmext.`` scope prefix."""
    return hook_cfg['type'].split('.')[-1] == 'MultigridHook'


@dataclass(frozen=True)
class MultigridOptions:
    """Options of ``MultigridHook`` (see its docstring for their meaning).

    Sequences are stored as tuples. The fields of :data:`SCHEDULE_FIELDS`
    define the multigrid epoch axis (passed to
    :func:`mmext.multigrid.build_multigrid_schedule` and saved in
    checkpoints).

    Every option is checked by type first (the message names the option,
    the value, what is expected and an example), then by range: factors in
    their intervals, ``long_cycle_factors`` coarse to fine and ending with
    ``(1, 1)``, ``lr_steps`` starting at 0 and increasing. Checks that need
    the recipe (factors giving at least one frame and pixel, ``lr_steps``
    within ``max_epochs``) are the schedule's
    (:func:`mmext.multigrid.build_multigrid_schedule`).

    Raises:
        ValueError: For a value of the wrong type or out of range.
    """
    long_cycle: bool = True
    short_cycle: bool = True
    epoch_factor: float = 1.5
    long_cycle_factors: Tuple[Tuple[float, float], ...] = (
        DEFAULT_LONG_CYCLE_FACTORS)
    short_cycle_factors: Tuple[float, ...] = DEFAULT_SHORT_CYCLE_FACTORS
    short_cycle_mode: str = 'absolute'
    bn_base_size: Optional[int] = 8
    precise_bn_iters: int = 200
    lr_steps: Optional[Tuple[int, ...]] = None
    skip_broken_clips: bool = False
    data_wait_threshold: Optional[float] = DATA_WAIT_THRESHOLD
    data_wait_iters: int = 10

    SCHEDULE_FIELDS = ('long_cycle', 'short_cycle', 'epoch_factor',
                       'long_cycle_factors', 'short_cycle_factors',
                       'short_cycle_mode')

    def __post_init__(self):
        self._check_types()
        object.__setattr__(self, 'long_cycle_factors',
                           tuple(tuple(f) for f in self.long_cycle_factors))
        object.__setattr__(self, 'short_cycle_factors',
                           tuple(self.short_cycle_factors))
        if self.lr_steps is not None:
            object.__setattr__(self, 'lr_steps', tuple(self.lr_steps))
        self._check_values()

    def _check_types(self) -> None:
        """Raise for a value of the wrong type, before anything uses it."""
        for name in ('long_cycle', 'short_cycle', 'skip_broken_clips'):
            if not isinstance(getattr(self, name), bool):
                _fail(name, getattr(self, name), 'True or False', 'False')
        if not _is_number(self.epoch_factor):
            _fail('epoch_factor', self.epoch_factor,
                  'a number > 0 (total epochs = max_epochs x epoch_factor)',
                  '1.5')
        pairs = self.long_cycle_factors
        if not _is_sequence(pairs) or not all(
                _is_sequence(f) and len(f) == 2 and all(map(_is_number, f))
                for f in pairs):
            _fail('long_cycle_factors', pairs,
                  'a list of (t, s) pairs: factors of the base clip length '
                  'and crop size, coarse to fine, ending with (1, 1)',
                  '[(0.25, 0.5**0.5), (0.5, 0.5**0.5), (0.5, 1), (1, 1)]')
        if not _is_sequence(self.short_cycle_factors) or not all(
                map(_is_number, self.short_cycle_factors)):
            _fail('short_cycle_factors', self.short_cycle_factors,
                  'a list of crop factors in (0, 1)', '[0.5, 0.5**0.5]')
        if not isinstance(self.short_cycle_mode, str):
            _fail('short_cycle_mode', self.short_cycle_mode,
                  f'one of {SHORT_CYCLE_MODES}', "'absolute'")
        for name, what, example in (
                ('bn_base_size', 'None, 0 (no sub-batch BN) or a positive '
                 'clip count', '8'),
                ('precise_bn_iters', 'an int >= 0 (0 disables precise BN)',
                 '200'),
                ('data_wait_iters', 'an int >= 1', '10')):
            value = getattr(self, name)
            if not (_is_int(value) or (value is None
                                       and name == 'bn_base_size')):
                _fail(name, value, what, example)
        threshold = self.data_wait_threshold
        if threshold is not None and not _is_number(threshold):
            _fail('data_wait_threshold', threshold,
                  'a share in [0, 1] (0 or None disables the data-wait '
                  'warning)', '0.2')
        steps = self.lr_steps
        if steps is not None and not (_is_sequence(steps)
                                      and all(map(_is_int, steps))):
            _fail('lr_steps', steps, 'None or a list of epochs [0, ...]',
                  '[0, 40, 80]')

    def _check_values(self) -> None:
        """Raise for a value out of range (types are checked already)."""
        if not self.epoch_factor > 0:
            raise ValueError(f'epoch_factor must be > 0, got '
                             f'{self.epoch_factor}')
        if not (self.long_cycle or self.short_cycle):
            raise ValueError(
                'Multigrid needs long_cycle or short_cycle (or both)')
        self._check_long_cycle_factors()
        factors = self.short_cycle_factors
        if not factors or not all(0 < f < 1 for f in factors):
            raise ValueError(f'short_cycle_factors must be factors in (0, 1) '
                             f'of the crop size, got {list(factors)}')
        if self.short_cycle_mode not in SHORT_CYCLE_MODES:
            raise ValueError(f'short_cycle_mode must be one of '
                             f'{SHORT_CYCLE_MODES}, got '
                             f'{self.short_cycle_mode!r}')
        base = self.bn_base_size
        if base is not None and base < 0:
            raise ValueError(f'bn_base_size must be None, 0 (no sub-batch '
                             f'BN) or a positive clip count, got {base}')
        if self.precise_bn_iters < 0:
            raise ValueError(f'precise_bn_iters must be an int >= 0 (0 '
                             f'disables precise BN), got '
                             f'{self.precise_bn_iters}')
        threshold = self.data_wait_threshold
        if threshold is not None and not 0 <= threshold <= 1:
            raise ValueError(f'data_wait_threshold must be a share in [0, '
                             f'1] (0 or None disables the data-wait '
                             f'warning), got {threshold}')
        if self.data_wait_iters < 1:
            raise ValueError(f'data_wait_iters must be an int >= 1, got '
                             f'{self.data_wait_iters}')
        steps = self.lr_steps
        if steps is not None and (len(steps) < 2 or steps[0] != 0 or any(
                b <= a for a, b in zip(steps, steps[1:]))):
            raise ValueError(
                f'lr_steps must start at 0 and increase strictly, one entry '
                f'per LR stage start in recipe epochs (e.g. [0] + the '
                f'MultiStepLR milestones: [0, 40, 80]); got {list(steps)}')

    def _check_long_cycle_factors(self) -> None:
        """(t, s) in (0, 1], coarse to fine, the base shape (1, 1) last:
        the long cycle ends at the recipe's shape and every LR stage
        restarts it from the coarsest shape (paper Sec. 3.1)."""
        factors = self.long_cycle_factors
        if not factors:
            raise ValueError(
                'long_cycle_factors must list at least one (t, s)')
        for t, s in factors:
            if not (0 < t <= 1 and 0 < s <= 1):
                raise ValueError(
                    f'long_cycle_factors entry {(t, s)}: t and s must be in '
                    f'(0, 1] (factors of the base clip length T and crop '
                    f'size S)')
        volumes = [t * s * s for t, s in factors]
        if tuple(factors[-1]) != (1, 1) or any(
                b < a for a, b in zip(volumes, volumes[1:])):
            raise ValueError(
                f'long_cycle_factors must run coarse to fine (each shape '
                f'T x S^2 at least the one before) and end with the base '
                f'shape (1, 1); got {[tuple(f) for f in factors]}. E.g. the '
                f'default {[tuple(f) for f in DEFAULT_LONG_CYCLE_FACTORS]}.')

    @classmethod
    def names(cls) -> Tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, options: dict) -> 'MultigridOptions':
        """Options from keyword values, naming an unknown key.

        Args:
            options (dict): A subset of :meth:`names`.

        Raises:
            ValueError: For an unknown option (listing the known ones), or
                as the constructor.
        """
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise ValueError(f'unknown MultigridHook options {unknown}; '
                             f'known: {sorted(cls.names())}')
        return cls(**options)

    @classmethod
    def from_hook_config(cls, hook_cfg: dict) -> 'MultigridOptions':
        """Options of a ``custom_hooks`` entry (its ``type``, ``priority``
        and ``_scope_`` keys are not options)."""
        return cls.from_dict({
            k: v
            for k, v in hook_cfg.items() if k not in _HOOK_CFG_KEYS
        })

    def schedule_kwargs(self) -> dict:
        """The :data:`SCHEDULE_FIELDS` as keyword arguments of
        :func:`~mmext.multigrid.build_multigrid_schedule`."""
        return {name: getattr(self, name) for name in self.SCHEDULE_FIELDS}
