"""Plot AGVM's per-module factors and gradient variances over iterations.

Usage: python tools/analysis/plot_agvm.py WORK_DIR [--out agvm.png]

Reads ``WORK_DIR/<timestamp>/vis_data/scalars.json`` (mmengine's
LocalVisBackend; all runs of the work dir in time order, so a resumed run
continues the curves) and draws ``agvm_mu/<module>`` (the applied factor s_i)
and ``agvm_d/<module>`` (d_i = 1 - cos of the halves' gradients).
"""
import argparse
import glob
import json
import os.path as osp
from collections import defaultdict
from typing import Dict, List, Tuple

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

Series = Dict[str, List[Tuple[int, float]]]


def load_agvm_scalars(work_dir: str) -> Tuple[Series, Series]:
    """Collect the AGVM scalars of every run in ``work_dir``.

    Args:
        work_dir (str): A training work dir.

    Returns:
        tuple[dict, dict]: factors and variances, each mapping a module name
        to ``(iteration, value)`` pairs sorted by iteration.

    Raises:
        FileNotFoundError: If the work dir has no ``scalars.json`` with
            AGVM scalars.
    """
    files = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data',
                                      'scalars.json')))
    series = {'agvm_mu/': defaultdict(dict), 'agvm_d/': defaultdict(dict)}
    for path in files:
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                for key, value in record.items():
                    for prefix, by_module in series.items():
                        if key.startswith(prefix):
                            by_module[key[len(prefix):]][
                                record['step']] = value
    if not series['agvm_mu/']:
        raise FileNotFoundError(
            f'no agvm_mu/* scalars in {work_dir}/*/vis_data/scalars.json; '
            'was it trained with mmext.AGVMOptimWrapper?')
    return tuple({name: sorted(points.items())
                  for name, points in by_module.items()}
                 for by_module in series.values())


def plot(factors: Series, variances: Series, out: str) -> None:
    """Draw factors (top) and variances (bottom) into ``out``."""
    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    for ax, data, label in ((axes[0], factors, 'factor s_i (agvm_mu)'),
                            (axes[1], variances, 'd_i = 1 - cos (agvm_d)')):
        for name, points in data.items():
            ax.plot([p[0] for p in points], [p[1] for p in points],
                    label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    axes[1].set_xlabel('iteration')
    fig.suptitle('AGVM per-module modulation')
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('work_dir')
    parser.add_argument('--out', default='agvm.png')
    args = parser.parse_args()
    factors, variances = load_agvm_scalars(args.work_dir)
    plot(factors, variances, args.out)
    print(f'wrote {args.out}: {len(factors)} modules, '
          f'{max(len(p) for p in factors.values())} points')


if __name__ == '__main__':
    main()
