"""Seed statistics of the accuracy benchmarks: t intervals, paired
differences, bootstrap intervals, detectable differences."""
import math
import random
import statistics
from typing import Callable, Dict, Optional, Sequence, Tuple

from scipy import stats

__all__ = ['summary', 'paired', 'format_summary', 'format_interval',
           'bootstrap_groups', 'bootstrap_interval', 'detectable_difference']


def _t(n: int, level: float) -> float:
    """Two-sided t quantile for a mean of ``n`` values."""
    return float(stats.t.ppf(0.5 + level / 2, n - 1))


def summary(values: Sequence[float], level: float = 0.95
            ) -> Dict[str, object]:
    """``n``, ``mean``, sample ``std``, ``sem``, ``min``, ``max``,
    ``values`` and the t interval of the mean (``low``, ``high``; NaN for
    one value). ValueError for none."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError('summary of no values')
    n, mean = len(values), statistics.fmean(values)
    std = statistics.stdev(values) if n > 1 else math.nan
    sem = std / math.sqrt(n)
    half = _t(n, level) * sem if n > 1 else math.nan
    return dict(n=n, mean=mean, std=std, sem=sem, min=min(values),
                max=max(values), low=mean - half, high=mean + half,
                values=values)


def paired(first: Dict[int, float],
           second: Dict[int, float]) -> Dict[str, object]:
    """Per-seed ``second - first`` over the seeds both have: ``seeds``,
    ``differences`` and their :func:`summary` (with ``covers_zero``)."""
    seeds = sorted(set(first) & set(second))
    if not seeds:
        raise ValueError('paired differences need a seed run in both arms')
    diffs = [second[s] - first[s] for s in seeds]
    stats_ = summary(diffs)
    stats_['covers_zero'] = bool(stats_['low'] <= 0 <= stats_['high'])
    return dict(seeds=seeds, differences=diffs, summary=stats_)


def detectable_difference(std: float, n: int, level: float = 0.95,
                          power: float = 0.8) -> float:
    """Smallest true paired difference a run of ``n`` pairs with
    differences of sample std ``std`` detects at ``level`` with ``power``
    (two-sided t test, normal approximation of the power term)."""
    if n < 2 or math.isnan(std):
        return math.nan
    return (_t(n, level) + float(stats.norm.ppf(power))) * std / math.sqrt(n)


def bootstrap_groups(groups: Sequence[Sequence], statistic: Callable,
                     level: float = 0.95, samples: int = 2000,
                     seed: int = 0) -> Tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(groups)``, each group
    resampled with replacement on its own (a bootstrap stratified by group:
    the seeds of each arm and schedule); the same ``seed``, the same
    interval."""
    rng = random.Random(seed)
    draws = sorted(statistic([rng.choices(g, k=len(g)) for g in groups])
                   for _ in range(samples))
    tail = (1 - level) / 2
    return (draws[int(tail * (samples - 1))],
            draws[int((1 - tail) * (samples - 1))])


def bootstrap_interval(first: Sequence[float], second: Sequence[float],
                       statistic: Callable, level: float = 0.95,
                       samples: int = 2000, seed: int = 0
                       ) -> Tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(first, second)``, each
    sample resampled with replacement on its own."""
    return bootstrap_groups([first, second], lambda g: statistic(*g), level,
                            samples, seed)


def format_interval(interval: Tuple[float, float]) -> str:
    """``'[low, high]'`` with two decimals."""
    return f'[{interval[0]:.2f}, {interval[1]:.2f}]'


def format_summary(stats_: Optional[dict], scale: float = 1.0,
                   digits: int = 3) -> str:
    """``'mean +- std (n=N)'``, values times ``scale``; ``'-'`` for None."""
    if stats_ is None:
        return '-'
    std = stats_['std'] * scale
    std = 'nan' if math.isnan(std) else f'{std:.{digits}f}'
    return f'{stats_["mean"] * scale:.{digits}f} +- {std} (n={stats_["n"]})'
