"""AGVM at a large batch by the paper's protocol: tune each arm, then seeds.

Usage: python tools/benchmark/agvm_large_batch.py [--seeds 0 1 ... 7]
    [--k 8] [--epochs 12] [--lrs-small ...] [--lrs-large ...]
    [--lrs-lamb ...] [--jobs 2] [--device cpu|cuda] [--json]

Setting (Xue et al., NeurIPS 2022, Sec. 3, CPU-sized): segmentation of
generated scenes (``scenes.py``) by a small FPN whose backbone is pre-trained
once (cached by code and settings), fresh neck and head per run. BN sees one
micro-batch of ``--batch``; a large step accumulates ``--k``. Every arm:
exponential warm-up over ``--warmup-share``, then poly decay; SGD momentum
0.9 (LAMB: pytorch_optimizer's), weight decay 1e-4.

Protocol (the paper's Sec. 4: baselines at their tuned LR):

1. Tune ``small``, ``large`` and ``large-lamb`` on ``--tune-seed`` over
   their LR grids; the lowest val loss wins.
2. Gate (reported, deciding nothing): d_backbone / d_i at N = 2 B and k B
   on the tuned ``large`` run at AGVM's start and mid-training, with a
   bootstrap interval of the change of the clamped ratio.
3. Over ``--seeds``: ``small``, ``large``, ``large-agvm`` (from
   ``--agvm-delay`` of the warm-up after it), ``large-agvm0`` (from step 0),
   ``large-static`` (AGVM's mean factors, fixed) and ``large-lamb``.

Printed: the tuning table, the gate, per arm mIoU and val loss (mean +- std),
paired differences with 95 % t intervals, the share of the small/large gap
closed, run times and the load; ``--json`` prints everything as one line.
"""
import argparse
import concurrent.futures
import hashlib
import importlib.util
import inspect
import json
import logging
import math
import multiprocessing
import os
import os.path as osp
import statistics
import sys
import time
import warnings
from functools import lru_cache

import torch
from mmengine.logging import MMLogger
from mmengine.optim import OptimWrapper, build_optim_wrapper
from mmengine.optim.scheduler import PolyLR
from agvm_diagnostic import module_layout, variance_by_batch_size
from seed_stats import bootstrap_interval, format_interval, paired, summary

import mmext  # noqa: F401
import scenes as scenes_module
from mmext.agvm.statistics import DEFAULT_RATIO_RANGE
from mmext.lr_scaling import scaled_lrs
from mmext.warmup import ExpWarmupLR
from scenes import SceneSegmentor, make_scenes, mean_iou, segmentation_loss

ARMS = ('small', 'large', 'large-agvm', 'large-agvm0', 'large-static',
        'large-lamb')
TUNED = {'small': 'lrs_small', 'large': 'lrs_large',
         'large-lamb': 'lrs_lamb'}
MODULES = ['backbone', 'neck', 'decode_head']
# Seeds of the three disjoint scene draws.
TRAIN_SEED, VAL_SEED, PRETRAIN_SEED = 1, 2, 3


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add('--seeds', type=int, nargs='+', default=list(range(8)))
    add('--tune-seed', type=int, default=100)
    add('--batch', type=int, default=8,
        help='small batch B = the micro-batch BN sees in every arm')
    add('--k', type=int, default=8, help='large batch = k x B, k even')
    add('--epochs', type=int, default=12)
    add('--train-images', type=int, default=1280)
    add('--val-images', type=int, default=256)
    add('--image-size', type=int, default=32)
    add('--lrs-small', type=float, nargs='+', default=[0.04, 0.08, 0.16, 0.32])
    add('--lrs-large', type=float, nargs='+', default=[0.08, 0.16, 0.32, 0.64])
    add('--lrs-lamb', type=float, nargs='+', default=[0.005, 0.01, 0.02, 0.04])
    add('--warmup-share', type=float, default=0.3)
    add('--agvm-delay', type=float, default=0.2,
        help='AGVM starts this share of the warm-up after its end (the '
        'released recipes: 100 of 460 iterations)')
    add('--update-interval', type=int, default=1)
    add('--ema-momentum', type=float, default=0.97)
    add('--gate-repeats', type=int, default=5)
    add('--pretrain-images', type=int, default=2048)
    add('--pretrain-steps', type=int, default=600)
    add('--jobs', type=int, default=2,
        help='runs at a time, each in its own process')
    add('--threads', type=int, default=1, help='torch threads per run')
    add('--device', default='cpu', help='cpu, cuda or cuda:N')
    add('--work-dir', default='work_dirs/agvm_large_batch')
    add('--json', action='store_true')
    args = parser.parse_args(argv)
    if args.k < 2 or args.k % 2:
        parser.error(f'--k must be even and >= 2 (AGVM compares the first '
                     f'and second k/2 micro-batches), got {args.k}')
    for name in ('batch', 'epochs', 'train_images', 'val_images', 'jobs',
                 'threads', 'gate_repeats', 'pretrain_steps',
                 'update_interval'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got '
                         f'{getattr(args, name)}')
    if len(args.seeds) < 2 or len(set(args.seeds)) != len(args.seeds):
        parser.error(f'--seeds: at least 2 distinct seeds for paired '
                     f'intervals, got {args.seeds}')
    if args.train_images < args.k * args.batch:
        parser.error(f'--train-images ({args.train_images}) must hold one '
                     f'large batch of --k x --batch = {args.k * args.batch} '
                     f'images')
    if importlib.util.find_spec('pytorch_optimizer') is None:
        parser.error('the large-lamb arm needs pytorch_optimizer: `pip '
                     'install pytorch_optimizer`')
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        parser.error(f'--device {args.device}: torch sees no CUDA device')
    if not 0 < args.warmup_share < 0.5:
        parser.error(f'--warmup-share must be in (0, 0.5), got '
                     f'{args.warmup_share}')
    return args


def plan(args) -> dict:
    """Micro-batches of a run, its warm-up and AGVM's start."""
    per_epoch = args.train_images // (args.batch * args.k) * args.k
    iters = per_epoch * args.epochs
    warmup = max(args.k, round(args.warmup_share * iters / args.k) * args.k)
    start = warmup + math.ceil(args.agvm_delay * warmup / args.k) * args.k
    return dict(iters_per_epoch=per_epoch, iters=iters, warmup=warmup,
                agvm_start=start, large_steps=iters // args.k)


@lru_cache(maxsize=4)
def scenes(num: int, size: int, seed: int, device: str = 'cpu'):
    """The scenes of one draw, held on ``device`` (compute-bound runs)."""
    images, labels = make_scenes(num, size, seed)
    return images.to(device), labels.to(device)


def backbone_key(args) -> str:
    """Hash of the pre-training code, settings and torch version."""
    code = inspect.getsource(scenes_module) + inspect.getsource(
        pretrained_backbone)
    settings = (args.image_size, args.pretrain_images, args.pretrain_steps,
                PRETRAIN_SEED, torch.__version__)
    return hashlib.sha1((code + repr(settings)).encode()).hexdigest()[:12]


def pretrained_backbone(args) -> str:
    """The backbone pre-trained on scenes disjoint from the train/val sets,
    made once and cached under the work dir by :func:`backbone_key`."""
    path = osp.join(args.work_dir, f'backbone_{backbone_key(args)}.pth')
    if osp.exists(path):
        return path
    images, labels = scenes(args.pretrain_images, args.image_size,
                            PRETRAIN_SEED, args.device)
    torch.manual_seed(PRETRAIN_SEED)
    model = SceneSegmentor().to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, args.pretrain_steps)
    gen = torch.Generator().manual_seed(PRETRAIN_SEED)
    for _ in range(args.pretrain_steps):
        idx = torch.randint(len(images), (32, ), generator=gen)
        loss = segmentation_loss(model, (images[idx], labels[idx]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
    os.makedirs(args.work_dir, exist_ok=True)
    torch.save(model.backbone.state_dict(), path)
    return path


class StaticFactorWrapper(OptimWrapper):
    """Fixed LR factors per module (param group) from iteration ``start``:
    AGVM's window without its adaptivity."""

    def __init__(self, optimizer, factors, start, **kwargs):
        super().__init__(optimizer, **kwargs)
        self.factors, self.start = factors, start

    def step(self, **kwargs):
        active = self._inner_count - 1 >= self.start
        with scaled_lrs(self.optimizer.param_groups,
                        self.factors if active else [1.0] * len(MODULES)):
            super().step(**kwargs)


def optim_wrapper(args, arm: str, lr: float, model, p: dict, factors=None):
    """The arm's optimizer wrapper (k micro-batches per step but small)."""
    k = 1 if arm == 'small' else args.k
    if arm == 'large-lamb':
        from pytorch_optimizer import Lamb
        return OptimWrapper(Lamb(model.parameters(), lr=lr,
                                 weight_decay=1e-4), accumulative_counts=k)
    sgd = dict(lr=lr, momentum=0.9, weight_decay=1e-4)
    if arm == 'large-static':
        groups = [dict(params=getattr(model, m).parameters())
                  for m in MODULES]
        return StaticFactorWrapper(torch.optim.SGD(groups, **sgd), factors,
                                   p['agvm_start'], accumulative_counts=k)
    cfg = dict(type='OptimWrapper', accumulative_counts=k,
               optimizer=dict(type='SGD', **sgd))
    if arm.startswith('large-agvm'):
        cfg.update(type='mmext.AGVMOptimWrapper',
                   constructor='mmext.AGVMOptimWrapperConstructor',
                   module_names=MODULES,
                   start_iter=0 if arm == 'large-agvm0' else p['agvm_start'],
                   update_interval=args.update_interval,
                   ema_momentum=args.ema_momentum)
    return build_optim_wrapper(model, cfg)


def train(args, arm: str, lr: float, seed: int, stop: int = None,
          factors=None):
    """Train one arm at ``lr`` from ``seed``: its results, or the model at
    micro-batch ``stop``."""
    p = plan(args)
    images, labels = scenes(args.train_images, args.image_size, TRAIN_SEED,
                            args.device)
    torch.manual_seed(seed)
    model = SceneSegmentor().to(args.device)
    model.backbone.load_state_dict(
        torch.load(pretrained_backbone(args), map_location=args.device))
    wrapper = optim_wrapper(args, arm, lr, model, p, factors)
    schedulers = [
        ExpWarmupLR(wrapper, start_factor=1e-3, by_epoch=False, begin=0,
                    end=p['warmup']),
        PolyLR(wrapper, eta_min=0.0, power=0.9, by_epoch=False,
               begin=p['warmup'], end=p['iters'])
    ]
    wrapper.initialize_count_status(model, 0, p['iters'])
    model.train()
    estimates, losses, it = [], [], 0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.randperm(len(images), generator=torch.Generator(
        ).manual_seed(seed * 1000 + epoch)).to(args.device)
        for b in range(p['iters_per_epoch']):
            if it == stop:
                return model
            idx = order[b * args.batch:(b + 1) * args.batch]
            with wrapper.optim_context(model):
                loss = segmentation_loss(model, (images[idx], labels[idx]))
            ema = getattr(wrapper, 'ema', None)
            updates = ema.num_updates if ema else 0
            wrapper.update_params(loss)
            for scheduler in schedulers:
                scheduler.step()
            if ema and ema.num_updates > updates:
                estimates.append(dict(step=(it + 1) // args.k,
                                      d=wrapper.last_variance.tolist(),
                                      s=ema.factors.tolist()))
            losses.append(loss.item())
            it += 1
    if stop is not None:
        return model
    val_images, val_labels = scenes(args.val_images, args.image_size,
                                    VAL_SEED, args.device)
    return dict(arm=arm, seed=seed, lr=lr,
                steps=it // (1 if arm == 'small' else args.k),
                miou=mean_iou(model, val_images, val_labels),
                val_loss=val_loss(model, val_images, val_labels),
                train_loss=statistics.fmean(losses[-p['iters_per_epoch']:]),
                seconds=time.perf_counter() - start, agvm=estimates)


@torch.no_grad()
def val_loss(model, images, labels, batch_size: int = 64) -> float:
    """Mean pixel cross entropy on the val scenes, in eval mode."""
    model.eval()
    total = sum(
        segmentation_loss(model, (images[i:i + batch_size],
                                  labels[i:i + batch_size])).item() *
        len(images[i:i + batch_size])
        for i in range(0, len(images), batch_size))
    model.train()
    return total / len(images)


def background_floor(labels) -> float:
    """mIoU of predicting background everywhere."""
    return float((labels == 0).double().mean()) / len(labels.unique())


def _quiet():
    """Silence the notes every run would repeat (mmengine, torch)."""
    warnings.filterwarnings('ignore', message='Detected call of')
    MMLogger.get_current_instance().setLevel(logging.ERROR)


def _job(args, arm, lr, seed, factors):
    torch.set_num_threads(args.threads)
    _quiet()
    return train(args, arm, lr, seed, factors=factors)


def run_all(args, jobs) -> list:
    """Train ``(arm, lr, seed, factors)`` jobs, ``--jobs`` at a time."""
    if args.jobs == 1:
        return [_job(args, *job) for job in jobs]
    with concurrent.futures.ProcessPoolExecutor(
            args.jobs, mp_context=multiprocessing.get_context('spawn')) as ex:
        return list(ex.map(_job, *zip(*[(args, *job) for job in jobs])))


def tune(args) -> dict:
    """The LR grids on ``--tune-seed``: runs and best LR per arm."""
    runs = run_all(args, [(arm, lr, args.tune_seed, None)
                          for arm, key in TUNED.items()
                          for lr in getattr(args, key)])
    best = {arm: min((r for r in runs if r['arm'] == arm),
                     key=lambda r: r['val_loss'])['lr'] for arm in TUNED}
    edges = [arm for arm, key in TUNED.items() if len(getattr(args, key)) > 1
             and best[arm] in (min(getattr(args, key)),
                               max(getattr(args, key)))]
    return dict(runs=runs, best=best, at_grid_edge=edges)


def measure_drift(args, model) -> list:
    """d_i and d_backbone / d_i at N = 2 B and N = k B on training scenes."""
    images, labels = scenes(args.train_images, args.image_size, TRAIN_SEED,
                            args.device)
    gen = torch.Generator().manual_seed(12345)

    def draw_half(n):
        idx = torch.randint(len(images), (n, ), generator=gen).to(
            args.device)
        return [(images[idx[i:i + args.batch]], labels[idx[i:i + args.batch]])
                for i in range(0, n, args.batch)]

    return variance_by_batch_size(
        model, draw_half, [2 * args.batch, args.k * args.batch],
        args.gate_repeats, module_layout(model, MODULES),
        loss_fn=segmentation_loss)


def gate_modules(rows, ratio_range=DEFAULT_RATIO_RANGE) -> list:
    """Per non-anchor module: d_backbone / d_i at both N and the change of
    its clamped mean, with a 95 % bootstrap interval."""
    lo, hi = ratio_range
    small, large = rows
    out = []
    for name in MODULES[1:]:
        a, b = ([min(max(v, lo), hi) for v in row['ratio'][name]['values']
                 if not math.isnan(v)] for row in (small, large))
        change = (statistics.fmean(b) / statistics.fmean(a)
                  if a and b else math.nan)
        out.append(dict(
            name=name,
            small=(small['ratio'][name]['mean'], small['ratio'][name]['std']),
            large=(large['ratio'][name]['mean'], large['ratio'][name]['std']),
            change=change,
            interval=bootstrap_interval(
                a, b, lambda x, y: statistics.fmean(y) / statistics.fmean(x))
            if a and b else (math.nan, math.nan)))
    return out


def gate(args, lr: float) -> dict:
    """The gate on the tuned ``large`` run at AGVM's start and mid-way."""
    p = plan(args)
    out = {}
    for point, stop in (("AGVM's start", p['agvm_start']),
                        ('mid-training', p['iters'] // 2 // args.k * args.k)):
        model = train(args, 'large', lr, args.seeds[0], stop=stop)
        rows = measure_drift(args, model)
        out[point] = dict(iteration=stop, rows=rows,
                          modules=gate_modules(rows))
    return out


def mean_factors(runs) -> list:
    """AGVM's factors per module averaged over its re-estimates and runs."""
    values = [e['s'] for r in runs for e in r['agvm']]
    return [statistics.fmean(v[i] for v in values)
            for i in range(len(MODULES))]


def compare(runs) -> dict:
    """Per arm summaries and the paired differences the report prints."""
    by_arm = {}
    for r in runs:
        by_arm.setdefault(r['arm'], {})[r['seed']] = r
    arms = {}
    for arm in sorted(by_arm, key=ARMS.index):
        rs = list(by_arm[arm].values())
        arms[arm] = dict(lr=rs[0]['lr'], steps=rs[0]['steps'], **{
            key: summary([r[key] for r in rs])
            for key in ('miou', 'val_loss', 'train_loss', 'seconds')})
    pairs = [('large-agvm', 'large'), ('large-agvm0', 'large'),
             ('large-static', 'large'), ('large-agvm', 'large-static'),
             ('large-lamb', 'large'), ('small', 'large')]
    diffs = {}
    for a, b in pairs:
        for key in ('miou', 'val_loss'):
            diffs[f'{a} - {b}: {key}'] = paired(
                {s: r[key] for s, r in by_arm[b].items()},
                {s: r[key] for s, r in by_arm[a].items()})
    gap = diffs['small - large: miou']['summary']['mean']
    closed = {a: diffs[f'{a} - large: miou']['summary']['mean'] / gap
              if gap > 0 else math.nan
              for a in ('large-agvm', 'large-agvm0', 'large-static',
                        'large-lamb')}
    return dict(arms=arms, differences=diffs, gap_closed=closed)


def _load() -> str:
    return ' '.join(f'{x:.2f}' for x in os.getloadavg())


def report_tuning(args, tuning):
    """The tuning table."""
    print(f'\ntuning on seed {args.tune_seed} (lowest val loss wins):')
    for r in sorted(tuning['runs'], key=lambda r: (r['arm'], r['lr'])):
        mark = ' <- tuned' if tuning['best'][r['arm']] == r['lr'] else ''
        print(f"  {r['arm']:<11} lr {r['lr']:<8g} val loss "
              f"{r['val_loss']:.4f}  mIoU {r['miou']:.3f}{mark}")
    if tuning['at_grid_edge']:
        print(f"  warning: the tuned LR of {tuning['at_grid_edge']} is at "
              f"the edge of its grid: widen the grid (--lrs-*)")


def report(args, gates, result, floor):
    """The gate, the arms and the paired differences."""
    for point, g in gates.items():
        rows = g['rows']
        print(f"\ngate at {point} (micro-batch {g['iteration']} of "
              f"large, seed {args.seeds[0]}): d_backbone / d_i at N="
              f"{rows[0]['batch_size']} and N={rows[1]['batch_size']} "
              f"({args.gate_repeats} repeats), change of the clamped ratio")
        for m in g['modules']:
            print(f"  {m['name']:<12} {m['small'][0]:.2f} +- "
                  f"{m['small'][1]:.2f} -> {m['large'][0]:.2f} +- "
                  f"{m['large'][1]:.2f}: x{m['change']:.2f} "
                  f"{format_interval(m['interval'])}")
    print(f'\n{"arm":<13}{"batch":>6}{"lr":>9}{"steps":>7}'
          f'{"mIoU":>20}{"val loss":>20}{"s/run":>8}')
    for arm, s in result['arms'].items():
        batch = args.batch * (1 if arm == 'small' else args.k)
        print(f"{arm:<13}{batch:>6}{s['lr']:>9.4g}{s['steps']:>7}"
              f"{s['miou']['mean']:>11.3f} +- {s['miou']['std']:.3f}"
              f"{s['val_loss']['mean']:>11.4f} +- {s['val_loss']['std']:.4f}"
              f"{s['seconds']['mean']:>8.0f}")
    print(f'(mIoU of predicting background everywhere: {floor:.3f})')
    print(f'\npaired by seed ({len(args.seeds)} seeds), mean and 95 % t '
          f'interval:')
    for name, d in result['differences'].items():
        s = d['summary']
        print(f"  {name:<36} {s['mean']:+.4f} [{s['low']:+.4f}, "
              f"{s['high']:+.4f}]{'  covers 0' if s['covers_zero'] else ''}")
    print('share of the small/large mIoU gap closed: ' + ', '.join(
        f'{a} {v:.0%}' if not math.isnan(v) else f'{a} - (no gap)'
        for a, v in result['gap_closed'].items()))


def main():
    args = parse_args()
    p = plan(args)
    load_before, start = _load(), time.perf_counter()
    print(f'{args.train_images} train / {args.val_images} val scenes of '
          f'{args.image_size} px, {args.epochs} epochs = {p["iters"]} '
          f'micro-batches of {args.batch}; large batch '
          f'{args.k * args.batch} = {p["large_steps"]} steps; warm-up '
          f'{p["warmup"]} micro-batches, AGVM from {p["agvm_start"]}; '
          f'seeds {args.seeds}; load average before {load_before}',
          flush=True)
    torch.set_num_threads(args.threads)
    _quiet()
    pretrained_backbone(args)
    tuning = tune(args)
    report_tuning(args, tuning)
    per_run = statistics.fmean(r['seconds'] for r in tuning['runs'])
    left = len(ARMS) * len(args.seeds)
    print(f'tuned in {(time.perf_counter() - start) / 60:.1f} min; '
          f'{per_run:.0f} s per run: the {left} runs left take about '
          f'{per_run * left / args.jobs / 60:.1f} min at --jobs '
          f'{args.jobs}', flush=True)
    best = dict(tuning['best'])
    for arm in ('large-agvm', 'large-agvm0', 'large-static'):
        best[arm] = best['large']
    gates = gate(args, best['large'])
    runs = run_all(args, [(arm, best[arm], seed, None) for seed in args.seeds
                          for arm in ARMS if arm != 'large-static'])
    factors = mean_factors([r for r in runs if r['arm'] == 'large-agvm'])
    runs += run_all(args, [('large-static', best['large'], seed, factors)
                           for seed in args.seeds])
    result = compare(runs)
    floor = background_floor(
        scenes(args.val_images, args.image_size, VAL_SEED, args.device)[1])
    report(args, gates, result, floor)
    print('large-static factors (AGVM\'s means): ' + ', '.join(
        f'{m} {f:.3f}' for m, f in zip(MODULES, factors)))
    wall = time.perf_counter() - start
    print(f'\n{len(tuning["runs"]) + len(runs)} runs, {args.jobs} at a '
          f'time, {args.threads} thread(s) each, {wall / 60:.1f} min wall; '
          f'load average before {load_before}, after {_load()}; '
          f'command: {" ".join(sys.argv)}')
    if args.json:
        print(json.dumps(dict(
            args=vars(args), plan=p, backbone_key=backbone_key(args),
            tuning=tuning, gate=gates, static_factors=factors,
            background_floor=floor, wall_seconds=wall,
            load_before=load_before, load_after=_load(), runs=runs,
            **result)))


if __name__ == '__main__':
    main()
