"""The options of ``MultigridHook``: one frozen object, defaults and checks.

:class:`MultigridOptions` is built once (by the hook, or from a config's
hook entry by ``MultigridPlan.from_config``) and handed to
:class:`~mmext.multigrid.MultigridPlan`; nothing else writes a default or
validates an option. Checks that need the recipe's base shape (factor
ranges) are the schedule's (:func:`mmext.multigrid.build_multigrid_schedule`).
"""
import dataclasses
from dataclasses import dataclass
from typing import Optional, Tuple

from .monitor import DATA_WAIT_THRESHOLD
from .schedule import DEFAULT_LONG_CYCLE_FACTORS, DEFAULT_SHORT_CYCLE_FACTORS

__all__ = ['MultigridOptions', 'is_multigrid_hook']

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

    Raises:
        ValueError: For a negative ``bn_base_size``, a ``precise_bn_iters``
            that is not an int >= 0, a non-bool ``skip_broken_clips``, a
            ``data_wait_threshold`` outside [0, 1], a ``data_wait_iters``
            that is not an int >= 1 or a non-bool ``keep_cpu_memory``.
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
    keep_cpu_memory: bool = True

    SCHEDULE_FIELDS = ('long_cycle', 'short_cycle', 'epoch_factor',
                       'long_cycle_factors', 'short_cycle_factors',
                       'short_cycle_mode')

    def __post_init__(self):
        object.__setattr__(self, 'long_cycle_factors',
                           tuple(tuple(f) for f in self.long_cycle_factors))
        object.__setattr__(self, 'short_cycle_factors',
                           tuple(self.short_cycle_factors))
        if self.lr_steps is not None:
            object.__setattr__(self, 'lr_steps', tuple(self.lr_steps))
        self._validate()

    def _validate(self) -> None:
        base = self.bn_base_size
        if base is not None and base < 0:
            raise ValueError(f'bn_base_size must be None, 0 (no sub-batch '
                             f'BN) or a positive clip count, got {base}')
        iters = self.precise_bn_iters
        if not isinstance(iters, int) or iters < 0:
            raise ValueError(f'precise_bn_iters must be an int >= 0 (0 '
                             f'disables precise BN), got {iters}')
        if not isinstance(self.skip_broken_clips, bool):
            raise ValueError(f'skip_broken_clips must be True or False, got '
                             f'{self.skip_broken_clips!r}')
        threshold = self.data_wait_threshold
        if threshold is not None and not 0 <= threshold <= 1:
            raise ValueError(f'data_wait_threshold must be a share in [0, '
                             f'1] (0 or None disables the data-wait '
                             f'warning), got {threshold}')
        watch = self.data_wait_iters
        if not isinstance(watch, int) or watch < 1:
            raise ValueError(f'data_wait_iters must be an int >= 1, got '
                             f'{watch}')
        if not isinstance(self.keep_cpu_memory, bool):
            raise ValueError(f'keep_cpu_memory must be True or False, got '
                             f'{self.keep_cpu_memory!r}')

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
