"""Time to accuracy: multigrid against the recipe's own trade-off curve.

Usage, from the project root (it trains through the speed-up tool's
``train_arm``, imported through ``tool_modules``):
python .dev_scripts/benchmark/multigrid_accuracy.py
[--config CONFIG] [--seeds 0 1 2 3 4] [--fractions 0.25 0.5 0.75 1]
[--curve-seeds 3] [--mg-fractions 1] [--arms paper constant ...]
[--reuse JSON ...]
[--jobs 1] [--threads 2] [--epochs N] [--margin 0.05] [--device cpu|cuda]
[--json] [--work-dir DIR] [--cfg-options key=value ...]
python .dev_scripts/benchmark/multigrid_accuracy.py --from-json FILE

The recipe (the config without its ``MultigridHook``) trains at each of
``--fractions`` of its epochs with its LR schedule scaled in proportion (its
trade-off curve), multigrid at each of ``--mg-fractions`` with the recipe's
seeds; every run is one ``multigrid_speedup.train_arm`` in a subprocess,
``--jobs`` at a time, evaluated at the recipe's T and T/2. Prints per arm and
schedule top-1, training time, CPU time, FLOPs, data wait and load; the
paired difference at equal schedule and the verdict; the speed-up at equal
accuracy read off the recipe's curve. Writes ``accuracy.json`` and
``accuracy.png`` into the work dir; ``--from-json`` re-makes both from such
a file without training. Rules and figures: docs/en/benchmarks.md (Time to
accuracy).
"""
import argparse
import copy
import itertools
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
import time
from argparse import Namespace

import tool_modules  # noqa: F401  (the user tools' modules, no PYTHONPATH)
from multigrid_speedup import (add_run_options, check_run_options,
                               setup_torch, shorten_schedule, train_arm)
from seed_stats import (bootstrap_groups, detectable_difference,
                        format_summary, paired, summary)

from bench_utils import load_run_config
from mmext.multigrid import MultigridPlan
from mmext.multigrid.checks import check_run
from mmext.multigrid.plan import is_multigrid_hook
from mmext.multigrid.data import parse_grid_shape
from mmext.multigrid.transformers import install_shape_adapters

DEFAULT_CONFIG = ('configs/multigrid/'
                  'recognizer3d_r18_adamw_multigrid_msr-action3d.py')
# Rules of the verdict, fixed before any run (docs/en/benchmarks.md): the
# recipe must beat chance by LEARNS at its full schedule, else the task cannot
# tell the arms apart; parity needs the paired 95 % interval inside +-margin.
LEARNS = 0.25
MARGIN = 0.05


# Short-cycle crop factors of the arms with the short cycle, not the paper's
# [1/2, 1/sqrt2]: of the MSR config's 64 px crop 1/2 gives 32 px, where the
# ResNet3d-18 (total stride 32) leaves a 1x1 final feature map
# (docs/en/multigrid.md#small-feature-maps); 0.6 gives 38 px, a 2x2 map, as
# the demo does (the MSR config set them until it dropped the short cycle).
SHORT_CYCLE_FACTORS = [0.6, 0.5**0.5]


# Multigrid arms: MultigridHook options over the config's, both cycles and
# the batch policy always explicit (the MSR config trains the long cycle
# alone). 'paper' is the paper's method (with the config's lr_rule).
def _arm(batch_policy='paper', long_cycle=True, short_cycle=True, **extra):
    arm = dict(batch_policy=batch_policy, long_cycle=long_cycle,
               short_cycle=short_cycle, **extra)
    if short_cycle:
        arm.update(short_cycle_factors=SHORT_CYCLE_FACTORS)
    return arm


MG_ARMS = {
    'paper': _arm(),
    'paper-linear': _arm(lr_rule='linear'),
    'constant': _arm('constant'),
    'sqrt-batch': _arm('sqrt'),
    'long-cycle': _arm(short_cycle=False),
    'long-cycle-sqrt': _arm('sqrt', short_cycle=False),
    'long-cycle-constant': _arm('constant', short_cycle=False),
    'short-cycle': _arm(long_cycle=False),
}
# Arm names of earlier JSON files (--reuse): the lr_rule arms.
LEGACY_ARMS = {'multigrid-sqrt': 'paper', 'multigrid': 'paper-linear'}
# The keys of a run that its cached result must match to be reused.
RUN_KEYS = ('config', 'cfg_options', 'device', 'threads', 'channels_last',
            'compile', 'amp', 'repeat_aug')


# ---------------------------------------------------------------- arithmetic
def reach(curve, target):
    """Where the piecewise-linear ``curve`` (``[(x, top1), ...]``, x
    ascending) first reaches top-1 ``target``: ``(x, bound)``, ``bound``
    None inside the curve; below its first point ``'at most'`` (reached by
    then); above all its points ``'at least'`` (not reached on the curve: its
    last x is a lower bound, not an extrapolation)."""
    if target <= curve[0][1]:
        return curve[0][0], 'at most'
    for (xa, ya), (xb, yb) in zip(curve, curve[1:]):
        if yb >= target > ya:
            return xa + (target - ya) * (xb - xa) / (yb - ya), None
    return curve[-1][0], 'at least'


def _mean(runs, key):
    return statistics.fmean(r[key] for r in runs)


def _top1(runs, t):
    return statistics.fmean(r['top1_at'][t] for r in runs)


def speedup(curve_groups, mg, key, t):
    """The recipe's ``key`` (seconds, flops) to reach multigrid's mean top-1
    at ``t`` on the recipe's mean curve (``curve_groups``: the recipe's runs
    per schedule, shortest first), over multigrid's mean ``key``; with its
    bound (:func:`reach`) and a 95 % bootstrap interval over seeds (each
    schedule's seeds resampled on their own)."""

    def ratio(groups):
        *recipe, runs = groups
        curve = [(_mean(g, key), _top1(g, t)) for g in recipe]
        x, bound = reach(curve, _top1(runs, t))
        return x / _mean(runs, key), bound

    groups = [*curve_groups, mg]
    value, bound = ratio(groups)
    low, high = bootstrap_groups(groups, lambda g: ratio(g)[0])
    return dict(value=value, bound=bound, low=low, high=high)


def _interval(s):
    """``'mean [low, high]'`` signed, without a negative zero."""
    return '{:+.3f} [{:+.3f}, {:+.3f}]'.format(
        *(round(s[k], 3) + 0.0 for k in ('mean', 'low', 'high')))


def verdict(recipe_top1, difference, chance, margin=MARGIN):
    """The verdict at equal schedule from the recipe's mean top-1 and the
    paired difference (multigrid - recipe), by the rules above."""
    s = difference['summary']
    if recipe_top1 - chance < LEARNS:
        return (f'undecided: the recipe reaches top-1 {recipe_top1:.3f}, '
                f'less than {LEARNS} above chance ({chance:.2f})')
    if s['low'] > 0 or s['high'] < 0:
        side = 'better' if s['mean'] > 0 else 'worse'
        return f'{side}: multigrid - recipe {_interval(s)} excludes 0'
    if -margin <= s['low'] and s['high'] <= margin:
        return (f'parity: multigrid - recipe {_interval(s)} lies within '
                f'+-{margin}')
    return (f'undecided: multigrid - recipe {_interval(s)} covers 0 but '
            f'not within +-{margin}; this run detects '
            f'{difference["detectable"]:.3f} (80 % power)')


def summarize(runs, clip_lens, chance, margin=MARGIN):
    """The benchmark's figures from its runs (each with ``arm``,
    ``fraction``, ``epochs``, ``seed``, ``top1_at`` keyed by ``str(T)``,
    ``seconds``, ``cpu_seconds``, ``flops``, ``data_share``, ``load``):
    per (arm, schedule) ``groups``; per multigrid arm and schedule the
    paired difference, speed-ups and verdict at each T (``comparisons``)."""
    by = {}
    for r in runs:
        by.setdefault((r['arm'], r['fraction']), []).append(r)
    lens = [str(t) for t in clip_lens]
    groups = []  # the recipe's curve first
    for (arm, fraction), rs in sorted(
            by.items(), key=lambda kv: (kv[0][0] != 'recipe', kv[0])):
        seeds = [r['seed'] for r in rs]
        if len(set(seeds)) != len(seeds):
            raise ValueError(f'{arm} at {fraction}: each seed once, got '
                             f'{seeds}')
        groups.append(dict(
            arm=arm, fraction=fraction, epochs=rs[0]['epochs'], seeds=seeds,
            top1={t: summary([r['top1_at'][t] for r in rs]) for t in lens},
            load={k: statistics.fmean(r['load'][k] for r in rs)
                  for k in ('load_average', 'other_cores')},
            bound=statistics.mode(r['bound'] for r in rs),
            **{k: summary([r[k] for r in rs]) for k in (
                'seconds', 'cpu_seconds', 'flops', 'data_share')}))
    recipe = {f: rs for (arm, f), rs in by.items() if arm == 'recipe'}
    curve = [recipe[f] for f in sorted(recipe)]
    comparisons = []  # the full schedule first
    for (arm, fraction), rs in sorted(by.items(),
                                      key=lambda kv: (kv[0][0], -kv[0][1])):
        if arm == 'recipe':
            continue
        c = dict(arm=arm, fraction=fraction)
        for t in lens:
            at = c[t] = dict(speedup={k: speedup(curve, rs, k, t)
                                      for k in ('seconds', 'flops')})
            if fraction in recipe:
                diff = at['difference'] = paired(
                    {r['seed']: r['top1_at'][t] for r in recipe[fraction]},
                    {r['seed']: r['top1_at'][t] for r in rs})
                diff['detectable'] = detectable_difference(
                    diff['summary']['std'], len(diff['seeds']))
        if fraction in recipe:
            c['verdict'] = verdict(_top1(recipe[fraction], lens[0]),
                                   c[lens[0]]['difference'], chance, margin)
        comparisons.append(c)
    return dict(clip_lens=clip_lens, chance=chance, margin=margin,
                groups=groups, comparisons=comparisons)


# ---------------------------------------------------------------- report
def _speedup_text(s):
    sign = {None: '', 'at least': '>= ', 'at most': '<= '}[s['bound']]
    return f'{sign}{s["value"]:.2f}x [{s["low"]:.2f}, {s["high"]:.2f}]'


def report(result):
    """The printed tables of :func:`summarize`'s result."""
    lens = [str(t) for t in result['clip_lens']]
    lines = [f'{"arm":>14} {"sched":>5} {"epochs":>6} {"seeds":>5} '
             + ' '.join(f'{f"top-1 T={t}":>22}' for t in lens)
             + f' {"train min":>16} {"CPU min":>7} {"TFLOPs":>7} '
               f'{"data wait":>9} {"bound":>7} {"load":>5} '
               f'{"other cores":>11}']
    for g in result['groups']:
        lines.append(
            f'{g["arm"]:>14} {g["fraction"]:>5.2f} {g["epochs"]:>6} '
            f'{len(g["seeds"]):>5} '
            + ' '.join(f'{format_summary(g["top1"][t]):>22}' for t in lens)
            + f' {format_summary(g["seconds"], 1 / 60, 1):>16} '
              f'{g["cpu_seconds"]["mean"] / 60:>7.1f} '
              f'{g["flops"]["mean"] / 1e12:>7.1f} '
              f'{g["data_share"]["mean"]:>9.0%} {g.get("bound", "?"):>7} '
              f'{g["load"]["load_average"]:>5.2f} '
              f'{g["load"]["other_cores"]:>11.2f}')
    for c in result['comparisons']:
        lines.append(f'{c["arm"]} at {c["fraction"]:g} of the recipe\'s '
                     f'schedule:')
        for t in lens:
            at, text = c[t], f'  T={t}:'
            if 'difference' in at:
                d = at['difference']
                text += (f' paired multigrid - recipe '
                         f'{_interval(d["summary"])} (n={len(d["seeds"])}), '
                         f'detectable {d["detectable"]:.3f};')
            s = at['speedup']
            share = time_share(s)
            lines.append(f'{text} speed-up at equal top-1: time '
                         f'{_speedup_text(s["seconds"])}, FLOPs '
                         f'{_speedup_text(s["flops"])}' + (
                             '' if share is None else
                             f'; time saving {share:.2f} of the FLOP '
                             f'saving'))
        if 'verdict' in c:
            lines.append(f'  verdict: {c["verdict"]}')
    return '\n'.join(lines)


def time_share(speedup):
    """The share of the FLOP saving that became time saving.

    Args:
        speedup (dict): The speed-ups at equal accuracy of one comparison,
            ``seconds`` and ``flops`` (each with ``value`` and ``bound``).

    Returns:
        float or None: The speed-up in time over that in FLOPs (issue 43:
        2.10x of 2.89x is 0.73); None where either is only a bound (the
        arm is off the recipe's curve).
    """
    time, flops = speedup['seconds'], speedup['flops']
    if time['bound'] or flops['bound']:
        return None
    return time['value'] / flops['value']


def plot(result, path):
    """Val top-1 against training time and FLOPs (a row per T): the
    recipe's curve (mean, +-1 std band, seeds) and multigrid's runs."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    lens = [str(t) for t in result['clip_lens']]
    axes = [('seconds', 1 / 60, 'training wall time (min)'),
            ('flops', 1e-12, 'training FLOPs (forward, TFLOPs)')]
    fig, grid = plt.subplots(len(lens), 2, figsize=(12, 4.5 * len(lens)),
                             squeeze=False)
    colours = {arm: f'C{k + 1}' for k, arm in enumerate(MG_ARMS)}
    markers = {1.0: 'o', 0.5: 's'}
    for row, t in zip(grid, lens):
        for ax, (key, scale, label) in zip(row, axes):
            recipe = [g for g in result['groups'] if g['arm'] == 'recipe']
            x = [g[key]['mean'] * scale for g in recipe]
            y = [g['top1'][t]['mean'] for g in recipe]
            sd = [g['top1'][t]['std'] if g['top1'][t]['n'] > 1 else 0
                  for g in recipe]
            ax.plot(x, y, '-o', color='C0', label='recipe (mean)')
            ax.fill_between(x, [a - b for a, b in zip(y, sd)],
                            [a + b for a, b in zip(y, sd)], color='C0',
                            alpha=0.2, label='recipe +-1 std over seeds')
            for g in result['groups']:
                xs = [v * scale for v in g[key]['values']]
                ys = g['top1'][t]['values']
                if g['arm'] == 'recipe':
                    ax.plot(xs, ys, '.', color='C0', alpha=0.5)
                    continue
                colour = colours.get(g['arm'], 'C1')
                ax.plot(xs, ys, markers.get(g['fraction'], '^'),
                        color=colour, alpha=0.4)
                ax.errorbar(statistics.fmean(xs), g['top1'][t]['mean'],
                            xerr=g[key]['std'] * scale,
                            yerr=g['top1'][t]['std'],
                            fmt=markers.get(g['fraction'], '^'),
                            color=colour, ms=9, capsize=3,
                            label=f'{g["arm"]} at {g["fraction"]:g} of the '
                                  f'schedule (seeds, mean +-1 std)')
            ax.axhline(result['chance'], ls=':', color='grey',
                       label='chance')
            ax.set(xlabel=label, ylabel=f'val top-1 at T={t}')
            ax.grid(alpha=0.3)
    grid[0][0].legend(fontsize=8, loc='lower right')
    title = [f'{c["arm"]} at {c["fraction"]:g}: speed-up at equal top-1 '
             f'{_speedup_text(c[lens[0]]["speedup"]["seconds"])} (time), '
             f'{_speedup_text(c[lens[0]]["speedup"]["flops"])} (FLOPs)'
             + (f'; {c["verdict"].split(":")[0]}' if 'verdict' in c else '')
             for c in result['comparisons']]
    fig.suptitle('\n'.join(title), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- runs
def plan_runs(seeds, fractions, curve_seeds, mg_fractions, arms, epochs):
    """Every run: the recipe at each fraction (all seeds at 1, the first
    ``curve_seeds`` below), each multigrid arm at each of ``mg_fractions``
    with all seeds; longest first (fewer idle slots at the end), the arms of
    a seed side by side."""
    runs = [dict(arm='recipe', fraction=f, seed=s) for f in fractions
            for s in (seeds if f == 1 else seeds[:curve_seeds])]
    runs += [dict(arm=arm, fraction=f, seed=s)
             for arm in arms for f in mg_fractions for s in seeds]
    for r in runs:
        r['epochs'] = round(r['fraction'] * epochs)
    return sorted(runs, key=lambda r: (-r['epochs'], r['seed'], r['arm']))


def _run_one(spec_file):
    """Worker (``--run``): train one run, write its result JSON."""
    with open(spec_file) as f:
        spec = json.load(f)
    args = Namespace(**spec['args'])
    setup_torch(None, args)
    arm = spec['run']['arm']
    result = train_arm(args, arm != 'recipe', spec['clip_lens'],
                       MG_ARMS.get(arm))[0]
    result['top1_at'] = {str(t): v for t, v in result['top1_at'].items()}
    with open(spec['result'], 'w') as f:
        json.dump(dict(spec['run'], key=spec['key'], **result), f,
                  default=str)


def _key_text(key):
    return json.dumps(key, sort_keys=True, default=str)


def earlier_runs(files):
    """``{key text: run}`` of the runs in earlier JSON files of this tool
    (``--reuse``), their legacy arm names renamed."""
    found = {}
    for name in files or []:
        with open(name) as f:
            for run in json.load(f)['runs']:
                arm = LEGACY_ARMS.get(run['arm'], run['arm'])
                run = dict(run, arm=arm, key=dict(run['key'], arm=arm),
                           reused_from=name)
                found[_key_text(run['key'])] = run
    return found


def launch(runs, args, clip_lens):
    """Run every run as a subprocess, ``args.jobs`` at a time; a run whose
    result file, or a ``--reuse`` JSON, holds the same run is reused.
    Returns the results."""
    earlier = earlier_runs(args.reuse)
    pending, active, done = list(runs), [], []
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    start = time.perf_counter()
    while pending or active:
        while pending and len(active) < args.jobs:
            run = pending.pop(0)
            name = f'{run["arm"]}_{run["fraction"]:g}_seed{run["seed"]}'
            run_dir = osp.join(args.work_dir, name)
            options = dict(args.cfg_options or {},
                           **{'randomness.seed': run['seed']})
            key = dict(run, clip_lens=clip_lens, **{
                k: getattr(args, k) for k in RUN_KEYS})
            key['cfg_options'] = options
            result = osp.join(run_dir, 'result.json')
            cached = earlier.get(_key_text(key))
            if cached is None and osp.isfile(result):
                with open(result) as f:
                    cached = json.load(f)
                cached = cached if cached.get('key') == json.loads(
                    json.dumps(key)) else None
            if cached is not None:
                print(f'{name}: reusing '
                      f'{cached.get("reused_from", result)}', flush=True)
                done.append(cached)
                continue
            os.makedirs(run_dir, exist_ok=True)
            spec = dict(run=run, key=key, clip_lens=clip_lens, result=result,
                        args=dict(vars(args), cfg_options=options,
                                  epochs=run['epochs'], work_dir=run_dir,
                                  synthetic=False))
            spec_file = osp.join(run_dir, 'spec.json')
            with open(spec_file, 'w') as f:
                json.dump(spec, f)
            log = open(osp.join(run_dir, 'log.txt'), 'w')
            active.append((name, result, log, subprocess.Popen(
                [sys.executable, __file__, '--run', spec_file], stdout=log,
                stderr=subprocess.STDOUT, env=env)))
        time.sleep(1)
        for item in [a for a in active if a[3].poll() is not None]:
            name, result, log, proc = item
            active.remove(item)
            log.close()
            if proc.returncode:
                for _, _, _, other in active:
                    other.terminate()
                sys.exit(f'{name} failed (exit {proc.returncode}); see '
                         f'{log.name}')
            with open(result) as f:
                done.append(json.load(f))
            r = done[-1]
            print(f'{name}: top-1 ' + ', '.join(
                f'T={t} {v:.3f}' for t, v in r['top1_at'].items())
                + f'; {r["seconds"] / 60:.1f} min, data wait '
                  f'{r["data_share"]:.0%}, load '
                  f'{r["load"]["load_average"]:.1f} ({len(done)}/{len(runs)} '
                  f'after '
                  f'{(time.perf_counter() - start) / 60:.0f} min)',
                flush=True)
    return done


def arm_config(cfg, arm):
    """A copy of ``cfg`` whose MultigridHook has the options of ``arm``."""
    cfg = copy.deepcopy(cfg)
    next(h for h in cfg.custom_hooks if is_multigrid_hook(h)).update(
        MG_ARMS[arm])
    return cfg


def clip_flops(cfg, arms):
    """``{'TxS': forward FLOPs of one clip}`` at every grid shape of the
    multigrid plans of ``arms`` (the recipe's shape included), counted on
    the model as the hook counts them."""
    from mmaction.registry import MODELS
    model = MODELS.build(cfg.model)
    install_shape_adapters(model)  # as the hook does before its checks
    flops = {}
    for arm in arms:
        plan = MultigridPlan.from_config(arm_config(cfg, arm))
        flops.update(check_run(plan, model,
                               cfg.train_dataloader.dataset.pipeline
                               ).clip_flops)
    return {f'{t}x{s}': f for (t, s), f in flops.items()}


def run_flops(run, flops):
    """Forward FLOPs of the clips a run trained (its per-shape table)."""
    return sum(s['iters'] * s['batch'] * flops[
        f'{s["clip_len"]}x{s["crop_size"]}'] for s in run['shapes'])


def fill_frame_caches(cfg):
    """Decode the videos of the config's train and val sets once, before
    any timed run, where they are CachedVideoDatasets (every run reads the
    same caches); ``{split: (videos decoded, seconds)}``."""
    from mmengine.registry import DATASETS, DefaultScope
    out = {}
    for split in ('train', 'val'):
        ds_cfg = cfg[f'{split}_dataloader'].dataset
        if ds_cfg.type != 'mmext.CachedVideoDataset':
            continue
        start = time.perf_counter()
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            dataset = DATASETS.build(copy.deepcopy(ds_cfg))
        count = dataset.frame_cache.fill(
            [dataset.get_data_info(i)['filename']
             for i in range(len(dataset))])
        out[split] = (count, time.perf_counter() - start)
        print(f'frame cache {split}: decoded {count} videos in '
              f'{out[split][1]:.1f} s', flush=True)
    return out


def _train(parser, args):
    """Check the options, train every run, return the summary."""
    check_run_options(parser, args, ('epochs', 'threads', 'jobs',
                                     'curve_seeds'))
    seeds = args.seeds
    if len(seeds) < 2 or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        parser.error(f'--seeds: at least 2 distinct seeds >= 0, got {seeds}')
    if 1 not in args.fractions or not set(args.mg_fractions) <= set(
            args.fractions):
        parser.error(f'--fractions {args.fractions} must hold 1 (the full '
                     f'schedule) and every --mg-fractions '
                     f'{args.mg_fractions} (the pairs at equal schedule)')
    cfg = load_run_config(args.config, args.cfg_options)
    epochs = args.epochs or cfg.train_cfg.max_epochs
    runs = plan_runs(seeds, args.fractions, args.curve_seeds,
                     args.mg_fractions, args.arms, epochs)
    lengths = sorted({(r['fraction'], r['epochs']) for r in runs})
    if min(e for _, e in lengths) < 1 or len({e for _, e in lengths}) < len(
            lengths):
        parser.error(f'--fractions of {epochs} epochs give {lengths}: each '
                     f'needs its own number of epochs >= 1')
    for fraction, arm in itertools.product(args.mg_fractions, args.arms):
        short = arm_config(cfg, arm)
        shorten_schedule(short, round(fraction * epochs))
        try:
            MultigridPlan.from_config(short)
        except ValueError as error:
            parser.error(f'{arm} at {fraction:g} of {epochs} epochs: {error}')
    base_t = parse_grid_shape(cfg.val_dataloader.dataset.pipeline)[0]
    clip_lens = [base_t, base_t // 2]
    setup_torch(parser, args)
    flops = clip_flops(cfg, args.arms)
    fill = fill_frame_caches(cfg)
    start, load_before = time.perf_counter(), os.getloadavg()
    os.makedirs(args.work_dir, exist_ok=True)
    print(f'{len(runs)} runs, {args.jobs} at a time', flush=True)
    done = launch(runs, args, clip_lens)
    for r in done:
        r['flops'] = run_flops(r, flops)
    result = summarize(done, clip_lens, 1 / cfg.model.cls_head.num_classes,
                       args.margin)
    result.update(config=args.config, epochs=epochs, device=args.device,
                  threads=args.threads, jobs=args.jobs,
                  total_seconds=time.perf_counter() - start,
                  frame_cache_fill=fill,
                  load_before=load_before, load_after=os.getloadavg(),
                  clip_gflops={k: v / 1e9 for k, v in flops.items()},
                  runs=done)
    return result


# Help of the options whose default here is not add_run_options' own.
HELP = dict(config='the multigrid config; its recipe is the config without '
            'the hook', epochs="the full schedule's epochs (default: the "
            "config's max_epochs)", threads='torch threads per training',
            work_dir='where the runs, accuracy.json and accuracy.png go',
            cfg_options='overrides applied to every run')


def show_defaults(parser):
    """Every option's help ends with its real default; the epilog gives the
    default run's size and time."""
    for action in parser._actions:
        action.help = HELP.get(action.dest, action.help)
        if (action.default not in (None, False, argparse.SUPPRESS)
                and action.help != argparse.SUPPRESS
                and 'default' not in (action.help or '')):
            action.help = f'{action.help or ""} (default: %(default)s)'
    d = parser.parse_args([])
    runs = plan_runs(d.seeds, d.fractions, d.curve_seeds, d.mg_fractions,
                     d.arms, 1)
    parser.epilog = (f'The default run: {len(runs)} trainings, about an '
                     f'hour one at a time on 2 idle CPU cores (MSR '
                     f'Action3D, docs/en/benchmarks.md); --reuse skips the '
                     f'done ones.')


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_run_options(parser, 'work_dirs/mg_accuracy')
    parser.add_argument('--seeds', type=int, nargs='+',
                        default=[0, 1, 2, 3, 4],
                        help='seeds of the full schedules (and multigrid)')
    parser.add_argument('--fractions', type=float, nargs='+',
                        default=[0.25, 0.5, 0.75, 1.0],
                        help="the recipe's curve: fractions of its epochs")
    parser.add_argument('--curve-seeds', type=int, default=3,
                        help='the first N --seeds (all if fewer) train the '
                             'fractions below 1')
    parser.add_argument('--mg-fractions', type=float, nargs='+',
                        default=[1.0],
                        help='multigrid at these fractions (all seeds)')
    parser.add_argument('--arms', nargs='+', choices=list(MG_ARMS),
                        default=['long-cycle', 'long-cycle-sqrt',
                                 'long-cycle-constant'],
                        help='multigrid arms (MG_ARMS: hook options)')
    parser.add_argument('--reuse', nargs='+', metavar='JSON',
                        help='reuse the equal runs of earlier JSON files')
    parser.add_argument('--jobs', type=int, default=1,
                        help='trainings at a time (subprocesses); times '
                        'that decide come from 1 on an idle machine')
    parser.add_argument('--margin', type=float, default=MARGIN,
                        help='parity: the paired interval within +-margin')
    parser.add_argument('--from-json', metavar='FILE',
                        help='report and plot a JSON of this tool; no runs')
    parser.add_argument('--run', help=argparse.SUPPRESS)
    parser.set_defaults(config=DEFAULT_CONFIG, epochs=None, threads=2)
    show_defaults(parser)
    args = parser.parse_args()
    if args.run:
        return _run_one(args.run)
    if args.from_json:
        with open(args.from_json) as f:
            result = json.load(f)
        out = osp.splitext(args.from_json)[0]
    else:
        result = _train(parser, args)
        out = osp.join(args.work_dir, 'accuracy')
        with open(out + '.json', 'w') as f:
            json.dump(result, f, default=str)
    print(report(result))
    plot(result, out + '.png')
    print(f'wrote {out}.png' if args.from_json else
          f'wrote {out}.json and {out}.png')
    if 'total_seconds' in result:
        print(f'total {result["total_seconds"] / 60:.1f} min; load average '
              f'(1, 5, 15 min) before {result["load_before"]}, after '
              f'{result["load_after"]}')
    if args.json:
        print(json.dumps(result, default=str))


if __name__ == '__main__':
    main()
