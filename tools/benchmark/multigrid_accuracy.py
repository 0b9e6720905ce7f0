"""Recipe vs multigrid top-1 over seeds, side by side, with wall-clock.

Usage: python tools/benchmark/multigrid_accuracy.py [--config CONFIG]
[--seeds 0 1 2] [--epochs N] [--device cpu|cuda] [--threads N] [--json]
[--work-dir DIR] [--cfg-options key=value ...]

For every seed the config (default: ``ACCURACY_CONFIG``, ResNet3d-18 at half
width, 32 channels, 112 px crops on the real fight clips, compute-bound on 2
CPU cores; 6 recipe epochs, seeds 0-2 and one torch thread by default, which
fit in 30 minutes there) trains ``--epochs`` recipe epochs
without its ``MultigridHook`` (the recipe) and with it (multigrid trains
x``epoch_factor`` as many epochs), both from the same seed, and evaluates
each once at the end. Each run is one run of
``tools/benchmark/multigrid_speedup.py`` (same shortening of the schedule,
same figures). Printed: per seed the two top-1 values, their difference
(multigrid - recipe), the wall-clock seconds of each run and whether it was
data- or compute-bound; then top-1 mean +- sample std per arm, the paired
difference's mean +- std, one validation clip's share of top-1 (the
resolution of a single value) and the speed-up of the summed wall-clock
against the schedule's iteration saving. ``--json`` adds one JSON object on
the last line.
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
from seed_stats import format_summary, paired, summary

from mmext.cli import load_run_config
from mmext.multigrid import MultigridPlan

ACCURACY_CONFIG = 'configs/multigrid/recognizer3d_r18w32_multigrid_fight.py'


def summarize(runs, iteration_saving=None, val_clips=None):
    """Arithmetic of the benchmark from its per-seed runs (no training).

    Args:
        runs (list[dict]): ``dict(seed=S, recipe=R, multigrid=M)`` with
            ``R``/``M`` holding at least ``top1``, ``seconds`` and ``bound``
            (the figures of ``multigrid_speedup.train_arm``).
        iteration_saving (float, optional): Recipe iterations / multigrid
            iterations (``MultigridPlan.iteration_saving()``).
        val_clips (int, optional): Validation clips, for the top-1 share of
            one clip.

    Returns:
        dict: ``recipe``/``multigrid`` (:func:`seed_stats.summary` of top-1),
        ``difference`` (:func:`seed_stats.paired`, multigrid - recipe),
        ``recipe_seconds``/``multigrid_seconds`` (summaries), ``speedup``
        (summed recipe seconds / summed multigrid seconds),
        ``speedup_per_seed``, ``iteration_saving``, ``one_clip``
        (1 / ``val_clips``) and ``bound`` (seed -> the two verdicts).
    """
    seeds = [r['seed'] for r in runs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f'each seed once, got {seeds}')
    arms = {arm: {r['seed']: r[arm] for r in runs}
            for arm in ('recipe', 'multigrid')}
    top1 = {arm: {s: r['top1'] for s, r in a.items()}
            for arm, a in arms.items()}
    secs = {arm: [a[s]['seconds'] for s in seeds] for arm, a in arms.items()}
    return dict(
        seeds=seeds,
        recipe=summary([top1['recipe'][s] for s in seeds]),
        multigrid=summary([top1['multigrid'][s] for s in seeds]),
        difference=paired(top1['recipe'], top1['multigrid']),
        recipe_seconds=summary(secs['recipe']),
        multigrid_seconds=summary(secs['multigrid']),
        speedup=sum(secs['recipe']) / sum(secs['multigrid']),
        speedup_per_seed=[r / m for r, m in zip(secs['recipe'],
                                                secs['multigrid'])],
        iteration_saving=iteration_saving,
        one_clip=1 / val_clips if val_clips else None,
        bound={s: dict(recipe=arms['recipe'][s]['bound'],
                       multigrid=arms['multigrid'][s]['bound'])
               for s in seeds})


def report(result):
    """The printed table of :func:`summarize`'s result."""
    lines = [f'{"seed":>4} {"recipe top-1":>12} {"multigrid top-1":>15} '
             f'{"difference":>10} {"recipe (s)":>10} {"multigrid (s)":>13}  '
             f'bound (recipe / multigrid)']
    diffs = dict(zip(result['difference']['seeds'],
                     result['difference']['differences']))
    for k, seed in enumerate(result['seeds']):
        lines.append(
            f'{seed:>4} {result["recipe"]["values"][k]:>12.3f} '
            f'{result["multigrid"]["values"][k]:>15.3f} '
            f'{diffs[seed]:>+10.3f} '
            f'{result["recipe_seconds"]["values"][k]:>10.1f} '
            f'{result["multigrid_seconds"]["values"][k]:>13.1f}  '
            f'{result["bound"][seed]["recipe"]} / '
            f'{result["bound"][seed]["multigrid"]}')
    clip = result['one_clip']
    lines += [
        f'recipe    top-1 {format_summary(result["recipe"])}',
        f'multigrid top-1 {format_summary(result["multigrid"])}',
        f'paired difference (multigrid - recipe) '
        f'{format_summary(result["difference"]["summary"])}'
        + ('' if clip is None else f'; one validation clip = {clip:.3f}'),
        f'wall-clock per run: recipe '
        f'{format_summary(result["recipe_seconds"], digits=1)} s, '
        f'multigrid {format_summary(result["multigrid_seconds"], digits=1)}'
        f' s -> speed-up {result["speedup"]:.2f}x'
        + ('' if result['iteration_saving'] is None else
           f' (iteration saving {result["iteration_saving"]:.2f}x)')]
    return '\n'.join(lines)


def _val_clips(cfg):
    ann = cfg.val_dataloader.dataset.get('ann_file', '')
    if not osp.isfile(ann):
        return None
    with open(ann) as f:
        return sum(1 for line in f if line.strip())


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_run_options(parser, 'work_dirs/mg_accuracy')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2],
                        help='seeds; each trains the recipe and multigrid')
    parser.set_defaults(config=ACCURACY_CONFIG, epochs=6, threads=1)
    args = parser.parse_args()
    check_run_options(parser, args, ('epochs', 'threads'))
    if min(args.seeds) < 0 or len(set(args.seeds)) != len(args.seeds):
        parser.error(f'--seeds must be distinct and >= 0, got {args.seeds}')
    cfg = load_run_config(args.config, args.cfg_options)
    shorten_schedule(cfg, args.epochs)
    try:
        MultigridPlan.from_config(cfg)
    except ValueError as error:
        parser.error(f'--epochs {args.epochs}: {error}')
    torch = setup_torch(parser, args)
    start = time.perf_counter()
    runs, plan, val_clips = [], None, None
    for seed in args.seeds:
        options = dict(args.cfg_options or {}, **{'randomness.seed': seed})
        run_args = Namespace(config=args.config, cfg_options=options,
                             epochs=args.epochs, synthetic=False,
                             work_dir=osp.join(args.work_dir, f'seed{seed}'))
        recipe, _, samples = train_arm(run_args, False)
        mg, mg_cfg, _ = train_arm(run_args, True)
        runs.append(dict(seed=seed, recipe=recipe, multigrid=mg))
        print(f'seed {seed}: top-1 recipe {recipe["top1"]:.3f} '
              f'({recipe["seconds"]:.0f} s), multigrid {mg["top1"]:.3f} '
              f'({mg["seconds"]:.0f} s)', flush=True)
        if plan is None:
            plan = MultigridPlan.from_config(mg_cfg, samples_per_rank=samples)
            val_clips = _val_clips(mg_cfg)
    result = summarize(runs, plan.iteration_saving(), val_clips)
    print(report(result))
    result.update(config=args.config, epochs=args.epochs,
                  device=args.device, threads=torch.get_num_threads(),
                  total_seconds=time.perf_counter() - start,
                  load_average=os.getloadavg(), runs=runs)
    print(f'total {result["total_seconds"] / 60:.1f} min; load average '
          f'(1, 5, 15 min): {result["load_average"]}')
    if args.json:
        print(json.dumps(result, default=str))


if __name__ == '__main__':
    main()
