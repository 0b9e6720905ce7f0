"""Print the multigrid schedule a config's MultigridHook will train.

Usage: python tools/analysis/multigrid_schedule.py CONFIG [--json]
[--plot OUT.png]
"""
import argparse
import json

import mmext  # noqa: F401  (``mmext::`` config prefix)
from mmengine.config import Config

from mmext.multigrid import build_multigrid_schedule, total_flops_ratio
from mmext.multigrid.lr import find_lr_steps
from mmext.multigrid.pipeline import parse_grid_shape

SCHEDULE_KEYS = ('long_cycle', 'short_cycle', 'epoch_factor',
                 'long_cycle_factors', 'short_cycle_factors',
                 'short_cycle_mode', 'lr_steps')


def schedule_from_config(cfg: Config):
    """Base shape, epochs and stages as the hook computes them.

    Returns:
        tuple: ``(base_b, base_t, base_s, max_epochs, stages)``.

    Raises:
        ValueError: If the config has no ``mmext.MultigridHook``.
    """
    hooks = [h for h in cfg.get('custom_hooks', [])
             if h['type'].split('.')[-1] == 'MultigridHook']
    if not hooks:
        raise ValueError('The config has no mmext.MultigridHook in '
                         'custom_hooks.')
    args = {k: v for k, v in hooks[0].items() if k in SCHEDULE_KEYS}
    base_t, _, base_s = parse_grid_shape(cfg.train_dataloader.dataset.pipeline)
    max_epochs = cfg.train_cfg.max_epochs
    steps, gamma = find_lr_steps(cfg.get('param_scheduler') or [], max_epochs)
    steps = list(args.pop('lr_steps', None) or steps)
    stages = build_multigrid_schedule(base_t, base_s, steps, max_epochs,
                                      gamma=gamma, **args)
    return cfg.train_dataloader.batch_size, base_t, base_s, max_epochs, stages


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('config')
    parser.add_argument('--json', action='store_true',
                        help='print a list of stage dicts')
    parser.add_argument('--plot', help='draw shape and LR over epochs')
    args = parser.parse_args()
    base_b, base_t, base_s, max_epochs, stages = schedule_from_config(
        Config.fromfile(args.config))
    rows = []
    for s in stages:
        d = s.to_dict()
        d['batch_size'] = base_b * s.shape.batch_factor
        # Iterations in units of the recipe's iterations per epoch.
        d['iterations'] = s.num_epochs * len(s.short_cycle) / sum(
            x.batch_factor for x in s.short_cycle)
        rows.append(d)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f'base (B, T, S) = ({base_b}, {base_t}, {base_s}), '
              f'{max_epochs} recipe epochs')
        print(f'{"lr stage":>8} {"batch":>6} {"T":>4} {"S":>4} '
              f'{"start":>6} {"end":>5} {"iters (x recipe iters/epoch)":>28}'
              f' {"rel. LR":>8}  short-cycle (batch, S)')
        for d in rows:
            cyc = [(base_b * x['batch_factor'], x['crop_size'])
                   for x in d['short_cycle']]
            print(f'{d["lr_stage"]:>8} {d["batch_size"]:>6} '
                  f'{d["clip_len"]:>4} {d["crop_size"]:>4} '
                  f'{d["start_epoch"]:>6} {d["end_epoch"]:>5} '
                  f'{d["iterations"]:>28.2f} {d["lr_factor"]:>8.4g}  {cyc}')
        iters = sum(d['iterations'] for d in rows)
        print(f'total: {stages[-1].end_epoch} epochs, {iters:.1f} x recipe '
              f'iters/epoch vs {max_epochs} -> {max_epochs / iters:.2f}x '
              f'fewer iterations; FLOPs x'
              f'{total_flops_ratio(stages, max_epochs, base_t, base_s):.3f} '
              f'of the recipe')
    if args.plot:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
        for d in rows:
            span = [d['start_epoch'], d['end_epoch']]
            ax1.plot(span, [d['clip_len'] * d['crop_size']**2] * 2, 'b')
            ax2.plot(span, [d['lr_factor']] * 2, 'r')
        ax1.set_ylabel('T x S^2 (long cycle)')
        ax2.set_ylabel('LR / base LR')
        ax2.set_yscale('log')
        ax2.set_xlabel('epoch')
        fig.savefig(args.plot)


if __name__ == '__main__':
    main()
