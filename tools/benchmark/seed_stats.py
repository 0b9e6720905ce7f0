"""Seed statistics of accuracy runs, shared by the accuracy benchmarks.

``tools/benchmark/multigrid_accuracy.py`` (recipe vs multigrid on the fight
clips) reports top-1 as mean +- sample standard deviation over seeds and,
for runs paired by seed, the per-seed differences.
"""
import math
import statistics
from typing import Dict, Optional, Sequence

__all__ = ['summary', 'paired', 'format_summary']


def summary(values: Sequence[float]) -> Dict[str, object]:
    """``n``, ``mean``, sample ``std`` (NaN for one value), ``min``, ``max``.

    Args:
        values (Sequence[float]): One value per seed (at least one).

    Returns:
        dict: Also ``values`` (as given, as a list) and ``sem``, the standard
        error of the mean (``std / sqrt(n)``, NaN for one value).

    Raises:
        ValueError: For no values.
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError('summary of no values')
    n = len(values)
    std = statistics.stdev(values) if n > 1 else math.nan
    return dict(n=n, mean=statistics.fmean(values), std=std,
                sem=std / math.sqrt(n), min=min(values), max=max(values),
                values=values)


def paired(first: Dict[int, float],
           second: Dict[int, float]) -> Dict[str, object]:
    """Per-seed ``second - first`` over the seeds both have, and its summary.

    Args:
        first (dict): Seed -> value (e.g. the recipe's top-1).
        second (dict): Seed -> value (e.g. multigrid's top-1).

    Returns:
        dict: ``seeds`` (sorted common seeds), ``differences`` (in that
        order) and ``summary`` (of the differences).

    Raises:
        ValueError: If no seed is in both.
    """
    seeds = sorted(set(first) & set(second))
    if not seeds:
        raise ValueError('paired differences need a seed run in both arms')
    diffs = [second[s] - first[s] for s in seeds]
    return dict(seeds=seeds, differences=diffs, summary=summary(diffs))


def format_summary(stats: Optional[dict], scale: float = 1.0,
                   digits: int = 3) -> str:
    """``'mean +- std (n=N)'``, values multiplied by ``scale``; ``'-'`` for
    None."""
    if stats is None:
        return '-'
    std = stats['std'] * scale
    std = 'nan' if math.isnan(std) else f'{std:.{digits}f}'
    return f'{stats["mean"] * scale:.{digits}f} +- {std} (n={stats["n"]})'

