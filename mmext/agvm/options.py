"""The AGVM optimizer wrapper's options: names, types and ranges.

Each message names the option, the value given, what is expected and an
example (:func:`mmext.agvm.statistics.option_error`). The integer options
are checked by :class:`mmext.agvm.AGVMSchedule`, ``ratio_range`` and
``ema_momentum`` in :mod:`mmext.agvm.statistics`; this module runs them
all, with the wrapper's own (unknown names, ``module_names``,
``statistic``), on a config before any model is built.
"""
import inspect

from mmengine.optim import OptimWrapper

from .schedule import AGVMSchedule, check_iteration
from .statistics import (DEFAULT_RATIO_RANGE, check_ema_momentum,
                         check_ratio_range, option_error)

__all__ = ['STATISTICS', 'check_wrapper_options']

# What the cosine is taken on: the raw gradient (SGD) or the
# Adam-preconditioned one (AdamW mode).
STATISTICS = ('grad', 'adam')


def check_wrapper_options(cls: type, options: dict) -> None:
    """Check AGVM wrapper options by name, type and range.

    The one place AGVM's options are checked (with the schedule's and the
    statistics' own checks, which it runs); ``AGVMOptimWrapper.check_options``.

    Args:
        cls (type): The wrapper class (its and its bases' ``__init__``
            arguments are the valid names).
        options (dict): ``optim_wrapper`` options (``type``,
            ``constructor``, ``optimizer``, ``base_constructor``,
            ``paramwise_cfg`` and mmengine's ``_scope_`` are ignored).

    Raises:
        ValueError: Naming the option, the value given, what is expected
            and an example; for an unknown option, all valid names.
    """
    options = {
        k: v for k, v in options.items()
        if k not in ('type', 'constructor', 'optimizer',
                     'base_constructor', 'paramwise_cfg', '_scope_')
    }
    known = set()
    for klass in cls.__mro__:
        if issubclass(klass, OptimWrapper) and '__init__' in vars(klass):
            known |= set(inspect.signature(klass.__init__).parameters)
    unknown = sorted(set(options) - known)
    if unknown:
        valid = sorted(known - {'self', 'kwargs', 'optimizer'})
        raise ValueError(f'{cls.__name__} got unknown options {unknown}; '
                         f'its options are {valid}')
    names = options.get('module_names')
    if names is not None and not (
            isinstance(names, (list, tuple))
            and all(isinstance(n, str) for n in names)):
        raise option_error(
            'module_names', names, 'None (the model\'s top-level '
            'modules) or a list of submodule names, anchor first',
            ['backbone', 'neck', 'rpn_head', 'roi_head'])
    statistic = options.get('statistic', 'grad')
    if statistic not in STATISTICS:
        raise option_error('statistic', statistic,
                           f'one of {list(STATISTICS)}', 'grad')
    counts = check_iteration('accumulative_counts',
                             options.get('accumulative_counts', 1), 1, 2)
    AGVMSchedule(options.get('update_interval', 10),
                 options.get('start_iter', 0), options.get('end_iter'),
                 counts, options.get('clip_grad_window'))
    check_ratio_range(options.get('ratio_range', DEFAULT_RATIO_RANGE))
    check_ema_momentum(options.get('ema_momentum', 0.97))
