"""Plot AGVM's per-module factors and gradient variances over iterations.

Usage: python tools/analysis/plot_agvm.py WORK_DIR [--config CFG]
    [--out IMAGE (default WORK_DIR/agvm.png)]

Reads the re-estimates (one point each) of every run in
``WORK_DIR/*/vis_data/scalars.json``, in time order (a resumed run
continues the curves), and marks the AGVM start and the gradient clipping
window of the config saved in the work dir (or ``--config``).
"""
import argparse
import glob
import json
import os
import os.path as osp
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from mmext.agvm import SCALAR_ESTIMATE, SCALAR_VARIANCE  # noqa: E402

Series = Dict[str, List[Tuple[int, float]]]


def load_agvm_scalars(work_dir: str) -> Tuple[Series, Series]:
    """Collect the re-estimates of every run in ``work_dir``.

    Returns:
        tuple[dict, dict]: Factors s_i and variances d_i, each mapping a
        module name to ``(iteration, value)`` pairs sorted by iteration.

    Raises:
        FileNotFoundError: No AGVM re-estimates in the work dir.
    """
    files = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data',
                                      'scalars.json')))
    factor, variance = f'{SCALAR_ESTIMATE}/', f'{SCALAR_VARIANCE}/'
    series = {factor: defaultdict(dict), variance: defaultdict(dict)}
    for path in files:
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                for key, value in record.items():
                    for prefix, by_module in series.items():
                        if key.startswith(prefix):
                            by_module[key[len(prefix):]][
                                record['step']] = value
    if not series[factor]:
        raise FileNotFoundError(
            f'no {factor}* scalars in {work_dir}/*/vis_data/scalars.json; '
            'was it trained with mmext.AGVMOptimWrapper (and did it reach '
            'start_iter)?')
    return tuple({name: sorted(points.items())
                  for name, points in by_module.items()}
                 for by_module in series.values())


def agvm_window(config: Optional[str]) -> Dict[str, object]:
    """``start_iter``, ``end_iter`` and ``clip_grad_window`` of a config's
    optim_wrapper (None where unset, all None without a config)."""
    if config is None:
        return dict(start_iter=None, end_iter=None, clip_grad_window=None)
    from mmengine.config import Config
    wrapper = Config.fromfile(config).get('optim_wrapper', {})
    return dict(start_iter=wrapper.get('start_iter', 0),
                end_iter=wrapper.get('end_iter'),
                clip_grad_window=wrapper.get('clip_grad_window'))


def saved_config(work_dir: str) -> Optional[str]:
    """The config mmengine dumped into ``work_dir`` (one ``*.py``), if any."""
    found = sorted(p for p in os.listdir(work_dir) if p.endswith('.py'))
    return osp.join(work_dir, found[-1]) if found else None


def plot(factors: Series, variances: Series, out: str,
         window: Optional[Dict[str, object]] = None,
         title: str = 'AGVM per-module modulation') -> None:
    """Draw factors (top) and variances (bottom, log) of
    :func:`load_agvm_scalars` into ``out`` (its folder is created), with
    the AGVM start/end and clipping window of :func:`agvm_window`."""
    window = window or {}
    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    for ax, data, label in ((axes[0], factors, 'factor s_i'),
                            (axes[1], variances, 'd_i = 1 - cos(G_A, G_B)')):
        for name, points in data.items():
            ax.plot([p[0] for p in points], [p[1] for p in points],
                    marker='.', ms=4, label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if window.get('start_iter') is not None:
            ax.axvline(window['start_iter'], color='k', ls='--', lw=1,
                       label='AGVM start' if ax is axes[0] else None)
        if window.get('end_iter') is not None:
            ax.axvline(window['end_iter'], color='k', ls=':', lw=1,
                       label='AGVM end' if ax is axes[0] else None)
        if window.get('clip_grad_window'):
            begin, end = window['clip_grad_window']
            ax.axvspan(begin, end, color='orange', alpha=0.15,
                       label='gradient clipping' if ax is axes[0] else None)
    axes[1].set_yscale('log')
    axes[0].legend(fontsize=8, ncol=2)
    axes[1].set_xlabel('iteration (one point per re-estimate, at the last '
                       'iteration of its optimizer step)')
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('work_dir')
    parser.add_argument('--config', help='config of the run (default: the '
                        'one mmengine saved in WORK_DIR)')
    parser.add_argument('--out', help='image to write (default: agvm.png '
                        'in WORK_DIR, beside the run, not the current '
                        'folder)')
    args = parser.parse_args(argv)
    if not osp.isdir(args.work_dir):
        parser.error(f'work dir {args.work_dir} does not exist')
    args.out = args.out or osp.join(args.work_dir, 'agvm.png')
    factors, variances = load_agvm_scalars(args.work_dir)
    config = args.config or saved_config(args.work_dir)
    plot(factors, variances, args.out, agvm_window(config),
         title=f'AGVM: {osp.basename(osp.normpath(args.work_dir))}')
    print(f'wrote {args.out}: {len(factors)} modules, '
          f'{max(len(p) for p in factors.values())} re-estimates')


if __name__ == '__main__':
    main()
