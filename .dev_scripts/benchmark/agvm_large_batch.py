"""AGVM at a large batch by the paper's protocol: tune each arm, then seeds.

Usage, from the project root (the d_i measurement is that of
``tools/analysis/agvm_variance.py``, imported through ``tool_modules``):
python .dev_scripts/benchmark/agvm_large_batch.py [--block sgd|adamw]
[--json] ...

Setting (Xue et al., NeurIPS 2022, Sec. 3, CPU-sized): segmentation of
generated scenes (``scenes.py``) by a small FPN whose backbone is pre-trained
once (cached by code and settings), fresh neck and head per run. BN sees one
micro-batch of ``--batch``; a large step accumulates ``--k``. Every arm:
exponential warm-up over ``--warmup-share``, then poly decay.

Protocol (the paper's Sec. 4: baselines at their tuned LR) for the arms of
:data:`ARMS` in ``--block``: each arm with a grid is tuned on
``--tune-seed`` (lowest val loss), the others take the LR of the arm they
name; the gate (SGD block; reported, deciding nothing) measures
d_backbone / d_i at N = 2 B and k B on the tuned ``large`` run; then every
arm over ``--seeds``, a static arm (AGVM's mean factors, fixed) after its
AGVM arm. A run with a non-finite loss, or whose AGVM stops on non-finite
gradients, is recorded as diverged and left out of the statistics. Printed:
tuning, gate, the arm and paired-difference tables as Markdown rows
(docs/en/benchmarks.md), each block's small/large gap closed; ``--json``
everything as one line.
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
from typing import NamedTuple, Optional, Tuple

import torch
from mmengine.logging import MMLogger
from mmengine.optim import OptimWrapper, build_optim_wrapper
from mmengine.optim.scheduler import PolyLR

import mmext  # noqa: F401
import scenes as scenes_module
import tool_modules  # noqa: F401  (agvm_diagnostic, without PYTHONPATH)
from agvm_diagnostic import module_layout, variance_by_batch_size
from mmext.agvm.constructor import build_optimizer
from mmext.agvm.statistics import DEFAULT_RATIO_RANGE
from mmext.lr_scaling import scaled_lrs
from mmext.warmup import ExpWarmupLR
from scenes import SceneSegmentor, make_scenes, mean_iou, segmentation_loss
from seed_stats import bootstrap_interval, format_interval, paired, summary


class Arm(NamedTuple):
    """An arm: ``optimizer`` (of :data:`OPTIMIZERS`), the ``--block`` values
    that run it, ``small`` batch (one micro-batch a step), ``lrs``: its LR
    grid option or the arm whose tuned LR it takes, AGVM's ``statistic``
    (None: no AGVM) ``from_start`` or after the warm-up, ``static_of``: the
    AGVM arm whose mean factors it applies, fixed; paired against ``vs``."""
    name: str
    optimizer: str
    blocks: Tuple[str, ...]
    small: bool = False
    lrs: str = 'large'
    statistic: Optional[str] = None
    from_start: bool = False
    static_of: Optional[str] = None
    vs: Tuple[str, ...] = ()


SGD, ADAMW = ('sgd', ), ('adamw', )
ARMS = (
    Arm('small', 'SGD', SGD, small=True, lrs='lrs_small', vs=('large', )),
    Arm('large', 'SGD', SGD, lrs='lrs_large'),
    Arm('large-agvm', 'SGD', SGD, statistic='grad',
        vs=('large', 'large-static')),
    Arm('large-agvm0', 'SGD', SGD, statistic='grad', from_start=True,
        vs=('large', )),
    Arm('large-static', 'SGD', SGD, static_of='large-agvm', vs=('large', )),
    Arm('large-lamb', 'Lamb', SGD + ADAMW, lrs='lrs_lamb',
        vs=('large', 'large-adamw')),
    Arm('small-adamw', 'AdamW', ADAMW, small=True, lrs='lrs_small_adamw',
        vs=('large-adamw', )),
    Arm('large-adamw', 'AdamW', ADAMW, lrs='lrs_large_adamw'),
    # The paper's AdamW mode: the cosine of g / (sqrt(v) + eps).
    Arm('large-adamw-agvm', 'AdamW', ADAMW, lrs='lrs_large_adamw',
        statistic='adam', vs=('large-adamw', 'large-adamw-static')),
    Arm('large-adamw-static', 'AdamW', ADAMW, lrs='lrs_large_adamw',
        static_of='large-adamw-agvm', vs=('large-adamw', )),
    # LAMB keeps Adam's moments (exp_avg_sq) and steps along Adam's
    # direction before its trust ratio: the AdamW statistic applies.
    Arm('large-lamb-agvm', 'Lamb', ADAMW, lrs='lrs_lamb', statistic='adam',
        vs=('large-adamw', 'large-lamb')),
)
ARM = {arm.name: arm for arm in ARMS}
# Per block: the (small, large) arms whose gap the others may close.
GAPS = {'sgd': ('small', 'large'), 'adamw': ('small-adamw', 'large-adamw')}
# The arms' optimizers (lr set per run); LAMB is pytorch_optimizer's.
OPTIMIZERS = dict(SGD=dict(type='SGD', momentum=0.9, weight_decay=1e-4),
                  AdamW=dict(type='AdamW', weight_decay=0.01),
                  Lamb=dict(type='Lamb', weight_decay=1e-4))
MODULES = ['backbone', 'neck', 'decode_head']
# Seeds of the three disjoint scene draws.
TRAIN_SEED, VAL_SEED, PRETRAIN_SEED = 1, 2, 3


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add('--block', choices=('sgd', 'adamw', 'all'), default='all',
        help='the arms to run (ARMS); the gate runs with the SGD block')
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
    add('--lrs-small-adamw', type=float, nargs='+',
        default=[0.002, 0.004, 0.008, 0.016])
    add('--lrs-large-adamw', type=float, nargs='+',
        default=[0.008, 0.016, 0.032, 0.064])
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
        parser.error('the LAMB arms need pytorch_optimizer: `pip install '
                     'pytorch_optimizer`')
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        parser.error(f'--device {args.device}: torch sees no CUDA device')
    if not 0 < args.warmup_share < 0.5:
        parser.error(f'--warmup-share must be in (0, 0.5), got '
                     f'{args.warmup_share}')
    return args


def arms(args) -> list:
    """The arms of ``--block``, in :data:`ARMS` order."""
    return [a for a in ARMS if args.block == 'all' or args.block in a.blocks]


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


def optimizer_cfg(name: str, lr: float) -> dict:
    """The config of :data:`OPTIMIZERS` ``name`` at ``lr``."""
    cfg = dict(OPTIMIZERS[name], lr=lr)
    if cfg['type'] == 'Lamb':
        from pytorch_optimizer import Lamb
        cfg['type'] = Lamb
    return cfg


def optim_wrapper(args, arm: Arm, lr: float, model, p: dict, factors=None):
    """The arm's optimizer wrapper (k micro-batches per step but small)."""
    k = 1 if arm.small else args.k
    optimizer = optimizer_cfg(arm.optimizer, lr)
    if arm.static_of:
        groups = [dict(params=list(getattr(model, m).parameters()))
                  for m in MODULES]
        return StaticFactorWrapper(build_optimizer(optimizer, groups),
                                   factors, p['agvm_start'],
                                   accumulative_counts=k)
    cfg = dict(type='OptimWrapper', accumulative_counts=k,
               optimizer=optimizer)
    if arm.statistic:
        cfg.update(type='mmext.AGVMOptimWrapper',
                   constructor='mmext.AGVMOptimWrapperConstructor',
                   module_names=MODULES, statistic=arm.statistic,
                   start_iter=0 if arm.from_start else p['agvm_start'],
                   update_interval=args.update_interval,
                   ema_momentum=args.ema_momentum)
    return build_optim_wrapper(model, cfg)


def micro_batches(args, seed: int):
    """The micro-batch indices of a run: a shuffle per epoch."""
    for epoch in range(args.epochs):
        order = torch.randperm(args.train_images, generator=torch.Generator(
        ).manual_seed(seed * 1000 + epoch)).to(args.device)
        for b in range(plan(args)['iters_per_epoch']):
            yield order[b * args.batch:(b + 1) * args.batch]


def train(args, name: str, lr: float, seed: int, stop: int = None,
          factors=None):
    """Train arm ``name`` at ``lr`` from ``seed``: its results, or the
    model at micro-batch ``stop``.

    A non-finite loss, or AGVM's FloatingPointError for non-finite
    gradients at a re-estimate, ends the run: ``diverged`` is its large step
    and it has no ``miou``, ``val_loss`` or ``train_loss``.
    """
    p, arm = plan(args), ARM[name]
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
    k = 1 if arm.small else args.k
    estimates, losses, diverged = [], [], None
    start = time.perf_counter()
    for it, idx in enumerate(micro_batches(args, seed)):
        if it == stop:
            return model
        with wrapper.optim_context(model):
            loss = segmentation_loss(model, (images[idx], labels[idx]))
        losses.append(loss.item())
        ema = getattr(wrapper, 'ema', None)
        updates = ema.num_updates if ema else 0
        try:  # a non-finite loss, or gradients AGVM measures
            if not math.isfinite(losses[-1]):
                raise FloatingPointError(f'loss {losses[-1]}')
            wrapper.update_params(loss)
        except FloatingPointError:
            diverged = it // k + 1
            break
        for scheduler in schedulers:
            scheduler.step()
        if ema and ema.num_updates > updates:
            estimates.append(dict(step=(it + 1) // args.k,
                                  d=wrapper.last_variance.tolist(),
                                  s=ema.factors.tolist()))
    if stop is not None:
        return model
    result = dict(arm=name, seed=seed, lr=lr, steps=len(losses) // k,
                  seconds=time.perf_counter() - start, agvm=estimates,
                  diverged=diverged)
    if diverged is None:
        val_images, val_labels = scenes(args.val_images, args.image_size,
                                        VAL_SEED, args.device)
        result.update(
            miou=mean_iou(model, val_images, val_labels),
            val_loss=val_loss(model, val_images, val_labels),
            train_loss=statistics.fmean(losses[-p['iters_per_epoch']:]))
    return result


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
    """Silence the notes every run would repeat (mmengine, torch, AGVM)."""
    warnings.filterwarnings('ignore', message='Detected call of')
    # Runs train without a runner: AGVM's start checks read a runner's
    # config; plan() places AGVM after the warm-up, without EMA or
    # auto_scale_lr (large-agvm0 starts in the warm-up on purpose).
    warnings.filterwarnings('ignore', message='AGVM start checks skipped')
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


def tune(args, grid_arms, factors=None) -> dict:
    """The LR grids of ``grid_arms`` on ``--tune-seed`` (a static arm with
    its ``factors[name]``): runs and best LR per arm, diverged runs last."""
    grids = {a.name: getattr(args, a.lrs) for a in grid_arms}
    runs = run_all(args, [(name, lr, args.tune_seed, (factors or {}).get(
        name)) for name, grid in grids.items() for lr in grid])
    best = {name: min((r for r in runs if r['arm'] == name),
                      key=lambda r: r.get('val_loss', math.inf))['lr']
            for name in grids}
    edges = [name for name, grid in grids.items()
             if len(grid) > 1 and best[name] in (min(grid), max(grid))]
    return dict(runs=runs, best=best, at_grid_edge=edges)


def tuned_lr(best: dict, arm: Arm) -> float:
    """The arm's LR: its own tuned one, or that of the arm it names."""
    return best[arm.name if arm.lrs.startswith('lrs_') else arm.lrs]


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
    """AGVM's factors per module averaged over its re-estimates and runs
    (1 without any: every run diverged before AGVM's start)."""
    values = [e['s'] for r in runs for e in r['agvm']] or [[1.0] * len(
        MODULES)]
    return [statistics.fmean(v[i] for v in values)
            for i in range(len(MODULES))]


def compare(runs) -> dict:
    """Per arm summaries (diverged runs listed, left out), the paired
    differences the report prints and the share of each block's gap
    closed."""
    names = [a.name for a in ARMS if any(r['arm'] == a.name for r in runs)]
    done = {name: {r['seed']: r for r in runs if r['arm'] == name
                   and r.get('diverged') is None} for name in names}
    arms = {}
    for name in names:
        rs = [r for r in runs if r['arm'] == name]
        arms[name] = dict(
            lr=rs[0]['lr'], steps=max(r['steps'] for r in rs),
            diverged={r['seed']: r['diverged'] for r in rs
                      if r.get('diverged') is not None},
            **{key: summary([r[key] for r in done[name].values()])
               for key in ('miou', 'val_loss', 'train_loss', 'seconds')
               if done[name]})
    pairs = [(a, b) for a in names for b in ARM[a].vs
             if b in names and set(done[a]) & set(done[b])]
    diffs = {}
    for a, b in pairs:
        for key in ('miou', 'val_loss'):
            diffs[f'{a} - {b}: {key}'] = paired(
                {s: r[key] for s, r in done[b].items()},
                {s: r[key] for s, r in done[a].items()})

    def mean(a, b):
        d = diffs.get(f'{a} - {b}: miou')
        return d['summary']['mean'] if d else math.nan

    closed = {}
    for block, (small, large) in GAPS.items():
        gap = mean(small, large)
        closed[block] = {a: mean(a, large) / gap if gap > 0 else math.nan
                         for a, b in pairs if b == large and a != small}
    return dict(arms=arms, pairs=pairs, differences=diffs, gap_closed={
        block: shares for block, shares in closed.items() if shares})


def _load() -> str:
    return ' '.join(f'{x:.2f}' for x in os.getloadavg())


def report_tuning(args, tuning):
    """The tuning table."""
    print(f'\ntuning on seed {args.tune_seed} (lowest val loss wins):')
    for r in sorted(tuning['runs'], key=lambda r: (r['arm'], r['lr'])):
        mark = ' <- tuned' if tuning['best'][r['arm']] == r['lr'] else ''
        result = (f"val loss {r['val_loss']:.4f}  mIoU {r['miou']:.3f}"
                  if r['diverged'] is None else
                  f"diverged at step {r['diverged']}")
        print(f"  {r['arm']:<18} lr {r['lr']:<8g} {result}{mark}")
    if tuning['at_grid_edge']:
        print(f"  warning: the tuned LR of {tuning['at_grid_edge']} is at "
              f"the edge of its grid: widen the grid (--lrs-*)")


def _signed(value: float, digits: int = 4) -> str:
    """``+0.0071`` / ``−0.0020`` (a minus sign, as in the docs)."""
    return f'{value:+.{digits}f}'.replace('-', '\u2212')


def report(args, gates, result, floor):
    """The gate, then the arms and the paired differences as Markdown
    table rows (docs/en/benchmarks.md)."""
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
    print(f'\n| arm | batch | tuned lr | steps | mIoU ({len(args.seeds)} '
          f'seeds) | val loss |\n|---|---|---|---|---|---|')
    for arm, s in result['arms'].items():
        cells = [f"{s[k]['mean']:.{d}f} ± {s[k]['std']:.{d}f}" if k in s
                 else '-' for k, d in (('miou', 3), ('val_loss', 4))]
        diverged = (f" (diverged, left out: seed: step {s['diverged']})"
                    if s['diverged'] else '')
        print(f"| {arm} | {args.batch * (1 if ARM[arm].small else args.k)} "
              f"| {s['lr']:g} | {s['steps']} | {cells[0]}{diverged} | "
              f"{cells[1]} |")
    print(f'(mIoU of predicting background everywhere: {floor:.3f})')
    print('\n| difference (95 % t interval, paired by seed) | mIoU | val loss '
          '|\n|---|---|---|')
    for a, b in result['pairs']:
        cells = []
        for key in ('miou', 'val_loss'):
            d = result['differences'][f'{a} - {b}: {key}']['summary']
            cells.append(f"{_signed(d['mean'])} [{_signed(d['low'])}, "
                         f"{_signed(d['high'])}]" +
                         (' (covers 0)' if d['covers_zero'] else ''))
        print(f'| {a} \u2212 {b} | {cells[0]} | {cells[1]} |')
    for block, shares in result['gap_closed'].items():
        small, large = GAPS[block]
        print(f'share of the {small}/{large} mIoU gap closed: ' + ', '.join(
            f'{a} {v:.0%}' if not math.isnan(v) else f'{a} - (no gap)'
            for a, v in shares.items()))


def main():
    args = parse_args()
    p, selected = plan(args), arms(args)
    load_before, start = _load(), time.perf_counter()
    print(f'{args.train_images} train / {args.val_images} val scenes of '
          f'{args.image_size} px, {args.epochs} epochs = {p["iters"]} '
          f'micro-batches of {args.batch}; large batch '
          f'{args.k * args.batch} = {p["large_steps"]} steps; warm-up '
          f'{p["warmup"]} micro-batches, AGVM from {p["agvm_start"]}; '
          f'arms {[a.name for a in selected]}; seeds {args.seeds}; load '
          f'average before {load_before}', flush=True)
    torch.set_num_threads(args.threads)
    _quiet()
    pretrained_backbone(args)
    first = [a for a in selected if not a.static_of]
    statics = [a for a in selected if a.static_of]
    tuning = tune(args, [a for a in first if a.lrs.startswith('lrs_')])
    report_tuning(args, tuning)
    per_run = statistics.fmean(r['seconds'] for r in tuning['runs'])
    left = len(selected) * len(args.seeds) + sum(
        len(getattr(args, a.lrs)) for a in statics
        if a.lrs.startswith('lrs_'))
    print(f'tuned in {(time.perf_counter() - start) / 60:.1f} min; '
          f'{per_run:.0f} s per run: the {left} runs left take about '
          f'{per_run * left / args.jobs / 60:.1f} min at --jobs '
          f'{args.jobs}', flush=True)
    best = tuning['best']
    gates = gate(args, best['large']) if 'large' in best else {}
    runs = run_all(args, [(a.name, tuned_lr(best, a), seed, None)
                          for seed in args.seeds for a in first])
    factors = {a.name: mean_factors([r for r in runs
                                     if r['arm'] == a.static_of])
               for a in statics}
    static_tuning = tune(args, [a for a in statics
                                if a.lrs.startswith('lrs_')], factors)
    if static_tuning['runs']:
        report_tuning(args, static_tuning)
    best.update(static_tuning['best'])
    runs += run_all(args, [(a.name, tuned_lr(best, a), seed, factors[a.name])
                           for seed in args.seeds for a in statics])
    result = compare(runs)
    floor = background_floor(
        scenes(args.val_images, args.image_size, VAL_SEED, args.device)[1])
    report(args, gates, result, floor)
    for a in statics:
        print(f"{a.name} factors ({a.static_of}'s means): " + ', '.join(
            f'{m} {f:.3f}' for m, f in zip(MODULES, factors[a.name])))
    tuning = dict(runs=tuning['runs'] + static_tuning['runs'], best=best,
                  at_grid_edge=tuning['at_grid_edge'] +
                  static_tuning['at_grid_edge'])
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
