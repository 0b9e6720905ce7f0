"""Train one recipe with and without multigrid and print both side by side.

Usage: python tools/benchmark/multigrid_speedup.py
[--config configs/multigrid/recognizer3d_r18_multigrid_fight.py]
[--epochs N] [--work-dir DIR] [--cfg-options key=value ...]

The baseline is the config without its MultigridHook. Printed per run:
wall-clock time, iterations, clips/s, final top-1; then the measured speed-up
against the schedule's theoretical iteration saving (target: >= 0.9 x) and
the top-1 gap (target: within 1 point).
"""
import argparse
import os.path as osp
import time

import mmext  # noqa: F401
from mmengine.config import DictAction
from mmengine.hooks import Hook

from mmext.runner import build_runner, load_run_config


class _ClipCounter(Hook):
    """Counts clips trained on."""

    def __init__(self):
        self.clips = 0

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        self.clips += len(data_batch['inputs'])


def _run(config, work_dir, epochs, multigrid, cfg_options=None):
    cfg = load_run_config(config, cfg_options, work_dir)
    cfg.train_cfg.max_epochs = epochs
    cfg.train_cfg.val_interval = 10**6  # evaluate once, at the end
    for s in cfg.param_scheduler:
        if 'milestones' in s:
            s.milestones = sorted({
                int(m * epochs / s.end)
                for m in s.milestones} - {0})
        s.end = min(s.end, epochs)
    if not multigrid:
        cfg.custom_hooks = [h for h in cfg.custom_hooks
                            if 'MultigridHook' not in h['type']]
    runner = build_runner(cfg)
    counter = _ClipCounter()
    runner.register_hook(counter)
    start = time.perf_counter()
    runner.train()
    seconds = time.perf_counter() - start
    top1 = runner.val_loop.run()['acc/top1']
    return dict(seconds=seconds, iters=runner.iter, clips=counter.clips,
                top1=top1)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        '--config',
        default='configs/multigrid/recognizer3d_r18_multigrid_fight.py')
    parser.add_argument('--epochs', type=int, default=4,
                        help='recipe epochs (multigrid trains x1.5)')
    parser.add_argument('--work-dir', default='work_dirs/mg_speedup')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='overrides applied to both runs, e.g. a larger model')
    args = parser.parse_args()
    base = _run(args.config, osp.join(args.work_dir, 'baseline'),
                args.epochs, False, args.cfg_options)
    mg = _run(args.config, osp.join(args.work_dir, 'multigrid'), args.epochs,
              True, args.cfg_options)
    print(f'{"":>10} {"time (s)":>9} {"iters":>6} {"clips/s":>8} '
          f'{"top-1":>6}')
    for name, r in (('baseline', base), ('multigrid', mg)):
        print(f'{name:>10} {r["seconds"]:>9.1f} {r["iters"]:>6} '
              f'{r["clips"] / r["seconds"]:>8.2f} {r["top1"]:>6.3f}')
    theory = base['iters'] / mg['iters']
    speedup = base['seconds'] / mg['seconds']
    print(f'speed-up {speedup:.2f}x; theoretical iteration saving '
          f'{theory:.2f}x; ratio {speedup / theory:.2f} (target >= 0.9); '
          f'top-1 gap {100 * (mg["top1"] - base["top1"]):+.1f} points '
          f'(target within 1)')


if __name__ == '__main__':
    main()
