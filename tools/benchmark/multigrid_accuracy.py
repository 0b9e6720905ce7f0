"""Recipe vs multigrid top-1 over seeds, paired, with a verdict; both arms
also evaluated at T/2 and T/4.

Usage: python tools/benchmark/multigrid_accuracy.py [--config CONFIG]
[--seeds 0 1 2 3 4] [--epochs N] [--device cpu|cuda] [--threads N] [--json]
[--work-dir DIR] [--cfg-options key=value ...]

Per seed, one run of ``multigrid_speedup.train_arm`` without the config's
``MultigridHook`` (the recipe) and one with it. Prints per seed and arm the
top-1 at each T, per arm mean +- std, the paired difference at each T with
its 95 % t interval and detectable difference, and the verdict. Details:
docs/en/benchmarks.md (Accuracy: recipe vs multigrid over seeds).
"""
import argparse
import json
import os
import os.path as osp
import time
from argparse import Namespace

import mmext  # noqa: F401
from multigrid_speedup import (add_run_options, check_run_options,
                               setup_torch, shorten_schedule, train_arm)
from seed_stats import detectable_difference, format_summary, paired, summary

from bench_utils import load_run_config
from mmext.multigrid import MultigridPlan
from mmext.multigrid.data import parse_grid_shape

ACCURACY_CONFIG = 'configs/multigrid/recognizer3d_r18_adamw_multigrid_fight.py'
ARMS = ('recipe', 'multigrid')
# The recipe must beat chance by this much for the run to decide parity.
LEARNS = 0.25


def summarize(runs, chance):
    """The benchmark's figures from its per-seed runs
    (``dict(seed=S, recipe=R, multigrid=M)``, each arm with ``top1_at``,
    the recipe's T first, and ``seconds``); ``chance`` is 1 / classes."""
    seeds = [r['seed'] for r in runs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f'each seed once, got {seeds}')
    lens = list(runs[0]['recipe']['top1_at'])
    # Clip lengths the model refuses have no top-1.
    clip_lens = [t for t in lens if runs[0]['recipe']['top1_at'][t]
                 is not None]
    out = dict(seeds=seeds, clip_lens=clip_lens, chance=chance,
               refused=[t for t in lens if t not in clip_lens])
    for t in clip_lens:
        top1 = {arm: {r['seed']: r[arm]['top1_at'][t] for r in runs}
                for arm in ARMS}
        diff = paired(top1['recipe'], top1['multigrid'])
        diff['detectable'] = detectable_difference(
            diff['summary']['std'], len(seeds))
        out[str(t)] = dict(difference=diff, **{
            arm: summary(list(top1[arm].values())) for arm in ARMS})
    secs = {arm: [r[arm]['seconds'] for r in runs] for arm in ARMS}
    out.update(seconds={arm: summary(v) for arm, v in secs.items()},
               speedup=sum(secs['recipe']) / sum(secs['multigrid']))
    out['verdict'] = verdict(out[str(clip_lens[0])], chance)
    return out


def _interval(s):
    """``'mean [low, high]'`` signed, without a negative zero."""
    return '{:+.3f} [{:+.3f}, {:+.3f}]'.format(
        *(round(s[k], 3) + 0.0 for k in ('mean', 'low', 'high')))


def verdict(at_t, chance):
    """The verdict at the recipe's T."""
    recipe, diff = at_t['recipe']['mean'], at_t['difference']
    s = diff['summary']
    interval = _interval(s)
    if recipe - chance < LEARNS:
        return (f'undecided: the recipe reaches top-1 {recipe:.3f}, less '
                f'than {LEARNS} above chance ({chance:.2f}); the task does '
                f'not tell the arms apart')
    if not diff['summary']['covers_zero']:
        side = 'better' if s['mean'] > 0 else 'worse'
        return f'multigrid is {side} than the recipe: {interval}'
    return (f'parity: multigrid - recipe {interval} covers 0; this run '
            f'detects a true difference of {diff["detectable"]:.3f} or more '
            f'(80 % power)')


def report(result):
    """The printed tables of :func:`summarize`'s result."""
    lens = result['clip_lens']
    lines = [f'{"seed":>4} ' + ' '.join(
        f'{f"{arm} T={t}":>16}' for t in lens for arm in ARMS)]
    for k, seed in enumerate(result['seeds']):
        lines.append(f'{seed:>4} ' + ' '.join(
            f'{result[str(t)][arm]["values"][k]:>16.3f}'
            for t in lens for arm in ARMS))
    for t in lens:
        at = result[str(t)]
        s = at['difference']['summary']
        lines.append(
            f'T={t}: recipe {format_summary(at["recipe"])}, multigrid '
            f'{format_summary(at["multigrid"])}; multigrid - recipe '
            f'{_interval(s)}, detectable {at["difference"]["detectable"]:.3f}')
    if result['refused']:
        lines.append(f'not evaluated: T={result["refused"]} (the model '
                     f'refuses these clip lengths)')
    secs = result['seconds']
    lines += [
        f'wall-clock per run: recipe '
        f'{format_summary(secs["recipe"], digits=1)} s, multigrid '
        f'{format_summary(secs["multigrid"], digits=1)} s -> '
        f'speed-up {result["speedup"]:.2f}x',
        f'verdict: {result["verdict"]}']
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_run_options(parser, 'work_dirs/mg_accuracy')
    parser.add_argument('--seeds', type=int, nargs='+',
                        default=[0, 1, 2, 3, 4],
                        help='seeds; each trains the recipe and multigrid')
    parser.set_defaults(config=ACCURACY_CONFIG, epochs=40, threads=1)
    args = parser.parse_args()
    check_run_options(parser, args, ('epochs', 'threads'))
    if len(args.seeds) < 2 or min(args.seeds) < 0 or len(set(
            args.seeds)) != len(args.seeds):
        parser.error(f'--seeds: at least 2 distinct seeds >= 0, got '
                     f'{args.seeds}')
    cfg = load_run_config(args.config, args.cfg_options)
    shorten_schedule(cfg, args.epochs)
    try:
        MultigridPlan.from_config(cfg)
    except ValueError as error:
        parser.error(f'--epochs {args.epochs}: {error}')
    base_t = parse_grid_shape(cfg.val_dataloader.dataset.pipeline)[0]
    clip_lens = [base_t, base_t // 2, base_t // 4]
    torch = setup_torch(parser, args)
    start, load_before = time.perf_counter(), os.getloadavg()
    runs = []
    for seed in args.seeds:
        options = dict(args.cfg_options or {}, **{'randomness.seed': seed})
        run_args = Namespace(**dict(vars(args), cfg_options=options,
                                    synthetic=False,
                                    work_dir=osp.join(args.work_dir,
                                                      f'seed{seed}')))
        run = dict(seed=seed)
        for arm in ARMS:
            run[arm] = train_arm(run_args, arm == 'multigrid', clip_lens)[0]
        runs.append(run)
        print(f'seed {seed}: top-1 ' + ', '.join(
            f'{arm} {run[arm]["top1"]:.3f} ({run[arm]["seconds"]:.0f} s)'
            for arm in ARMS), flush=True)
    result = summarize(runs, 1 / cfg.model.cls_head.num_classes)
    print(report(result))
    result.update(config=args.config, epochs=args.epochs,
                  device=args.device, threads=torch.get_num_threads(),
                  total_seconds=time.perf_counter() - start,
                  load_before=load_before, load_after=os.getloadavg(),
                  runs=runs)
    print(f'total {result["total_seconds"] / 60:.1f} min; load average '
          f'(1, 5, 15 min) before {load_before}, after '
          f'{result["load_after"]}')
    if args.json:
        print(json.dumps(result, default=str))


if __name__ == '__main__':
    main()
