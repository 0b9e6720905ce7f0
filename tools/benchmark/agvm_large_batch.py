"""Small vs large batch, with linear / square-root LR scaling, AGVM and LAMB.

Usage: python tools/benchmark/agvm_large_batch.py [--seeds 0 1 2]
    [--batch 8] [--k 8] [--epochs 8] [--train-images 1280] [--val-images 256]
    [--image-size 32] [--lr 0.02] [--lamb-lr 0.01] [--warmup-share 0.12]
    [--agvm-lr sqrt] [--update-interval 1] [--gate-repeats 3]
    [--arms ...] [--jobs 2] [--threads 1] [--device cpu] [--json]
    [--work-dir work_dirs/agvm_large_batch]

A setting where AGVM's mechanism can exist (Xue et al., NeurIPS 2022, Sec. 3:
at a large batch the modules' gradient variances drift apart): semantic
segmentation of generated scenes (``tools/benchmark/scenes.py``) by a small FPN
segmentor whose backbone (BN) the tool pre-trains once on disjoint scenes and
caches, with fresh neck and decode head in every run; BN always sees the
same micro-batch (``--batch`` images). Arms, the same epochs and images per
LR point (warm-up and decay counted in micro-batches):

  small:        batch B at ``--lr``;
  large-linear: batch k x B by accumulating k micro-batches, lr x k;
  large-sqrt:   the same at lr x sqrt(k) (the tuned baseline);
  large-agvm:   large-sqrt (``--agvm-lr``) with ``mmext.AGVMOptimWrapper``
                (halves: the first and second k/2 micro-batches of a step),
                from a little after the warm-up;
  large-lamb:   LAMB (pytorch_optimizer's ``Lamb``) at ``--lamb-lr``, the
                layer-wise alternative a user would pick instead.

Every arm: exponential warm-up from 1e-3 (``mmext.ExpWarmupLR``) over
``--warmup-share`` of training, then poly decay (power 0.9); SGD momentum
0.9, weight decay 1e-4 (LAMB: its own decoupled decay 1e-4).

The gate comes first: the large-batch arm of AGVM's LR is trained up to
AGVM's start, and there ``mmext.agvm.diagnostic`` measures d_backbone / d_i
at a small batch (two halves of one micro-batch each, 2 x ``--batch``) and
at the large batch (halves of k/2 micro-batches), BN always on one
micro-batch. Only if that ratio, clamped to AGVM's range, drifts with the
batch does the tool print a verdict on AGVM; otherwise it says the claim
is not testable here. Printed:
mIoU per arm (mean +- std over seeds, per seed), AGVM minus its plain arm
paired by seed, the share of the small/large gap it closes, AGVM's d_i and
factors during training, time per run with the share spent on data (in
memory) and the load average; ``--json`` prints everything as one line.
"""
import argparse
import concurrent.futures
import hashlib
import importlib.util
import json
import math
import multiprocessing
import os
import os.path as osp
import statistics
import time
from functools import lru_cache

import torch
from mmengine.optim import OptimWrapper, build_optim_wrapper
from mmengine.optim.scheduler import PolyLR

import mmext  # noqa: F401
from mmext.agvm import variance_by_batch_size
from mmext.agvm.diagnostic import module_layout, summarize
from mmext.agvm.statistics import DEFAULT_RATIO_RANGE
from scenes import (SceneSegmentor, make_scenes, mean_iou,
                                  segmentation_loss)
from mmext.warmup import ExpWarmupLR

ARMS = ('small', 'large-linear', 'large-sqrt', 'large-agvm', 'large-lamb')
MODULES = ['backbone', 'neck', 'decode_head']
# Seeds of the three disjoint scene draws.
TRAIN_SEED, VAL_SEED, PRETRAIN_SEED = 1, 2, 3
# Drift factor of the clamped d_backbone / d_i between the two batch sizes
# that counts as present (the factor AGVM takes moves by its square root,
# about 12 %).
DRIFT = 1.25


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add('--seeds', type=int, nargs='+', default=[0, 1, 2])
    add('--batch', type=int, default=8,
        help='small batch B = the micro-batch BN sees in every arm')
    add('--k', type=int, default=8, help='large batch = k x B, k even')
    add('--epochs', type=int, default=8)
    add('--train-images', type=int, default=1280)
    add('--val-images', type=int, default=256)
    add('--image-size', type=int, default=32)
    add('--lr', type=float, default=0.02, help='SGD lr of the small arm')
    add('--lamb-lr', type=float, default=0.01)
    add('--warmup-share', type=float, default=0.12)
    add('--agvm-lr', choices=['sqrt', 'linear'], default='sqrt',
        help='LR rule of the AGVM arm; it is paired with that plain arm')
    add('--agvm-delay', type=float, default=0.2,
        help='AGVM starts this share of the warm-up after its end (the '
        'released recipes: 100 of 460 iterations)')
    add('--update-interval', type=int, default=1)
    add('--ema-momentum', type=float, default=0.97)
    add('--gate-repeats', type=int, default=3)
    add('--pretrain-images', type=int, default=2048)
    add('--pretrain-steps', type=int, default=600)
    add('--arms', nargs='+', choices=ARMS, default=list(ARMS))
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
    if args.train_images < args.k * args.batch:
        parser.error(f'--train-images ({args.train_images}) must hold one '
                     f'large batch of --k x --batch = {args.k * args.batch} '
                     f'images')
    if 'large-lamb' in args.arms and importlib.util.find_spec(
            'pytorch_optimizer') is None:
        parser.error('the large-lamb arm uses pytorch_optimizer\'s Lamb, '
                     'which is not installed: `pip install '
                     'pytorch_optimizer`, or leave the arm out (--arms small '
                     'large-linear large-sqrt large-agvm)')
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        parser.error(f'--device {args.device}: torch sees no CUDA device')
    if not 0 < args.warmup_share < 0.5:
        parser.error(f'--warmup-share must be in (0, 0.5), got '
                     f'{args.warmup_share}')
    return args


def plan(args) -> dict:
    """Iterations (micro-batches) of a run, warm-up and AGVM start."""
    per_epoch = args.train_images // (args.batch * args.k) * args.k
    iters = per_epoch * args.epochs
    warmup = max(args.k, round(args.warmup_share * iters / args.k) * args.k)
    start = warmup + math.ceil(args.agvm_delay * warmup / args.k) * args.k
    return dict(iters_per_epoch=per_epoch, iters=iters, warmup=warmup,
                agvm_start=start, large_steps=iters // args.k)


def arm_lr(args, arm: str) -> float:
    rule = args.agvm_lr if arm == 'large-agvm' else arm.split('-')[-1]
    return {'small': args.lr, 'linear': args.lr * args.k,
            'sqrt': args.lr * math.sqrt(args.k),
            'lamb': args.lamb_lr}[rule]


@lru_cache(maxsize=4)
def scenes(num: int, size: int, seed: int, device: str = 'cpu'):
    """The scenes of one draw, held on ``device`` (training reads them
    from there: no data loading, the runs are compute-bound)."""
    images, labels = make_scenes(num, size, seed)
    return images.to(device), labels.to(device)


def _synchronize(device: str) -> None:
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device)


def pretrained_backbone(args) -> str:
    """The backbone pre-trained on scenes disjoint from the train/val sets:
    made once, cached under the work dir by its settings."""
    key = hashlib.sha1(repr((args.image_size, args.pretrain_images,
                             args.pretrain_steps, PRETRAIN_SEED, 1)).encode()
                       ).hexdigest()[:10]
    path = osp.join(args.work_dir, f'backbone_{key}.pth')
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
    start = time.perf_counter()
    for _ in range(args.pretrain_steps):
        idx = torch.randint(len(images), (32, ), generator=gen)
        loss = segmentation_loss(model, (images[idx], labels[idx]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
    os.makedirs(args.work_dir, exist_ok=True)
    torch.save(model.backbone.state_dict(), path)
    print(f'pre-trained the backbone on {args.pretrain_images} disjoint '
          f'scenes ({args.pretrain_steps} steps of 32, '
          f'{time.perf_counter() - start:.0f} s): {path}')
    return path


def fresh_model(args, seed: int, backbone_path: str) -> SceneSegmentor:
    torch.manual_seed(seed)
    model = SceneSegmentor().to(args.device)
    model.backbone.load_state_dict(
        torch.load(backbone_path, map_location=args.device))
    return model


def optim_wrapper(args, arm: str, model, p: dict):
    """The arm's optimizer wrapper (k micro-batches per step but small)."""
    k = 1 if arm == 'small' else args.k
    lr = arm_lr(args, arm)
    if arm == 'large-lamb':
        from pytorch_optimizer import Lamb
        return OptimWrapper(Lamb(model.parameters(), lr=lr,
                                 weight_decay=1e-4), accumulative_counts=k)
    cfg = dict(type='OptimWrapper', accumulative_counts=k,
               optimizer=dict(type='SGD', lr=lr, momentum=0.9,
                              weight_decay=1e-4))
    if arm == 'large-agvm':
        cfg.update(type='mmext.AGVMOptimWrapper',
                   constructor='mmext.AGVMOptimWrapperConstructor',
                   module_names=MODULES, start_iter=p['agvm_start'],
                   update_interval=args.update_interval,
                   ema_momentum=args.ema_momentum)
    return build_optim_wrapper(model, cfg)


def train(args, arm: str, seed: int, stop: int = None):
    """Train one arm and seed; ``stop``: return the model at that iteration.

    Returns:
        dict | SceneSegmentor: The run's results, or the model at ``stop``.
    """
    p = plan(args)
    images, labels = scenes(args.train_images, args.image_size, TRAIN_SEED,
                            args.device)
    model = fresh_model(args, seed, pretrained_backbone(args))
    wrapper = optim_wrapper(args, arm, model, p)
    schedulers = [
        ExpWarmupLR(wrapper, start_factor=1e-3, by_epoch=False, begin=0,
                    end=p['warmup']),
        PolyLR(wrapper, eta_min=0.0, power=0.9, by_epoch=False,
               begin=p['warmup'], end=p['iters'])
    ]
    wrapper.initialize_count_status(model, 0, p['iters'])
    model.train()
    losses, estimates = [], []
    data_s = compute_s = 0.0
    it = 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(images), generator=torch.Generator(
        ).manual_seed(seed * 1000 + epoch))
        epoch_loss = []
        for b in range(p['iters_per_epoch']):
            if it == stop:
                return model
            t0 = time.perf_counter()
            idx = order[b * args.batch:(b + 1) * args.batch]
            batch = (images[idx], labels[idx])
            _synchronize(args.device)
            t1 = time.perf_counter()
            with wrapper.optim_context(model):
                loss = segmentation_loss(model, batch)
            updates = getattr(getattr(wrapper, 'ema', None), 'num_updates',
                              0)
            wrapper.update_params(loss)
            for scheduler in schedulers:
                scheduler.step()
            if getattr(getattr(wrapper, 'ema', None), 'num_updates',
                       0) > updates:
                estimates.append(dict(
                    step=(it + 1) // args.k,
                    d=wrapper.last_variance.tolist(),
                    s=wrapper.ema.factors.tolist()))
            _synchronize(args.device)
            data_s += t1 - t0
            compute_s += time.perf_counter() - t1
            epoch_loss.append(loss.item())
            it += 1
        losses.append(statistics.fmean(epoch_loss))
    val_images, val_labels = scenes(args.val_images, args.image_size,
                                    VAL_SEED, args.device)
    return dict(arm=arm, seed=seed, lr=arm_lr(args, arm),
                steps=it // (1 if arm == 'small' else args.k),
                miou=mean_iou(model, val_images, val_labels),
                val_loss=val_loss(model, val_images, val_labels),
                epoch_losses=losses, seconds=data_s + compute_s,
                data_share=data_s / max(data_s + compute_s, 1e-9),
                agvm=estimates)


@torch.no_grad()
def val_loss(model, images, labels, batch_size: int = 64) -> float:
    """Mean pixel cross entropy on the val scenes, in eval mode (a
    continuous score where mIoU sits at its all-background floor)."""
    model.eval()
    total = sum(
        segmentation_loss(model, (images[i:i + batch_size],
                                  labels[i:i + batch_size])).item() *
        len(images[i:i + batch_size])
        for i in range(0, len(images), batch_size))
    model.train()
    return total / len(images)


def background_floor(labels) -> float:
    """mIoU of predicting background (class 0) everywhere: IoU of
    background = its pixel share, 0 for every other class present."""
    present = len(labels.unique())
    return float((labels == 0).double().mean()) / present


def _train_job(args, arm, seed):
    torch.set_num_threads(args.threads)
    return train(args, arm, seed)


def train_all(args) -> list:
    pairs = [(arm, seed) for seed in args.seeds for arm in args.arms]
    if args.jobs == 1:
        return [_train_job(args, arm, seed) for arm, seed in pairs]
    with concurrent.futures.ProcessPoolExecutor(
            args.jobs, mp_context=multiprocessing.get_context('spawn')) as ex:
        futures = [ex.submit(_train_job, args, arm, seed)
                   for arm, seed in pairs]
        return [f.result() for f in futures]


def measure_drift(args, model) -> dict:
    """d_i, d_0/d_i and mu_i at two halves of one micro-batch and at the
    large batch, on training images (``variance_by_batch_size``)."""
    images, labels = scenes(args.train_images, args.image_size, TRAIN_SEED,
                            args.device)
    gen = torch.Generator().manual_seed(12345)

    def draw_half(n):
        idx = torch.randint(len(images), (n, ), generator=gen)
        return [(images[idx[i:i + args.batch]], labels[idx[i:i + args.batch]])
                for i in range(0, n, args.batch)]

    sizes = [2 * args.batch, args.k * args.batch]
    rows = variance_by_batch_size(model, draw_half, sizes, args.gate_repeats,
                                  module_layout(model, MODULES),
                                  loss_fn=segmentation_loss)
    return dict(zip(('small', 'large'), rows))


def gate_verdict(drift: dict, ratio_range=DEFAULT_RATIO_RANGE,
                 factor: float = DRIFT):
    """Whether d_0 / d_i drifts between the two batch sizes within the clamp.

    A module drifts if its ratio clamped to ``ratio_range`` (mean over
    repeats; what AGVM's factor sqrt(clamp(d_0 / d_i)) follows) changes by
    ``factor`` or more between the small and the large batch, and the raw
    means differ by more than the repeats' spread. Ratios beyond the same
    bound at both sizes clamp to one value: AGVM's factor sits at that bound
    whatever the batch, so that is no drift.

    Returns:
        tuple[bool, list[dict]]: Present anywhere, and per non-anchor
        module ``name, small, large`` (mean, std) ratios, ``drift`` (clamped
        large over clamped small) and ``present``.
    """
    lo, hi = ratio_range
    modules = []
    for name in list(drift['small']['ratio'])[1:]:
        small, large = (drift[n]['ratio'][name] for n in ('small', 'large'))
        ratio = (min(max(large['mean'], lo), hi) /
                 min(max(small['mean'], lo), hi))
        spread = (abs(large['mean'] - small['mean'])
                  > (large['std'] or 0) + (small['std'] or 0))
        present = bool((ratio >= factor or ratio <= 1 / factor) and spread)
        modules.append(dict(name=name, small=(small['mean'], small['std']),
                            large=(large['mean'], large['std']),
                            drift=ratio, present=present))
    return any(m['present'] for m in modules), modules


def summarize_arms(runs, args):
    summary = {}
    for arm in args.arms:
        mine = sorted((r for r in runs if r['arm'] == arm),
                      key=lambda r: r['seed'])
        summary[arm] = dict(
            lr=mine[0]['lr'], steps=mine[0]['steps'],
            miou=summarize(r['miou'] for r in mine),
            per_seed=[r['miou'] for r in mine],
            val_loss=summarize(r['val_loss'] for r in mine),
            per_seed_val_loss=[r['val_loss'] for r in mine],
            final_loss=statistics.fmean(r['epoch_losses'][-1] for r in mine),
            seconds=statistics.fmean(r['seconds'] for r in mine),
            data_share=statistics.fmean(r['data_share'] for r in mine))
    return summary


def paired(summary, a: str, b: str, key: str = 'per_seed'):
    """a minus b per seed (of ``key``), mean +- std."""
    diffs = [x - y for x, y in zip(summary[a][key], summary[b][key])]
    return diffs, summarize(diffs)


def agvm_verdict(summary, plain: str, testable: bool) -> dict:
    """AGVM against its plain large arm, paired by seed, and the share of
    the small/large gap it closes.

    Args:
        summary (dict): From :func:`summarize_arms`, with ``small``,
            ``plain`` and ``large-agvm``.
        plain (str): The plain large arm of AGVM's LR rule.
        testable (bool): The gate's answer, carried into the result.

    Returns:
        dict: ``paired`` (per-seed mIoU differences), ``paired_mean``,
        ``paired_std``, ``gap`` (small minus plain, mean mIoU), ``closed``
        ((agvm - plain) / gap; NaN when there is no gap), ``testable``, and
        ``paired_val_loss`` (per-seed val loss differences).
    """
    diffs, (mean, std) = paired(summary, 'large-agvm', plain)
    loss_diffs, _ = paired(summary, 'large-agvm', plain, 'per_seed_val_loss')
    gap = summary['small']['miou'][0] - summary[plain]['miou'][0]
    closed = ((summary['large-agvm']['miou'][0] - summary[plain]['miou'][0])
              / gap if gap > 0 else math.nan)
    return dict(paired=diffs, paired_mean=mean, paired_std=std, gap=gap,
                closed=closed, testable=testable,
                paired_val_loss=loss_diffs)


def load_average() -> str:
    return ' '.join(f'{x:.2f}' for x in os.getloadavg())


def print_drift(title, drift):
    print(f'\n{title}: d_i, d_backbone / d_i (mean +- std over repeats)')
    for size, row in drift.items():
        cells = '  '.join(
            f"{name} d {row['d'][name]['mean']:.4f} ratio "
            f"{row['ratio'][name]['mean']:.2f}+-{row['ratio'][name]['std']:.2f}"
            for name in MODULES)
        print(f"  N={row['batch_size']:<4} ({size}) {cells}")


def main():
    args = parse_args()
    p = plan(args)
    load_before, start = load_average(), time.perf_counter()
    print(f'AGVM large-batch benchmark: {args.train_images} train / '
          f'{args.val_images} val scenes of {args.image_size} px, '
          f'{args.epochs} epochs = {p["iters"]} micro-batches of '
          f'{args.batch}; large batch {args.k * args.batch} = '
          f'{p["large_steps"]} steps; warm-up {p["warmup"]} micro-batches '
          f'({p["warmup"] // args.k} large steps), AGVM from micro-batch '
          f'{p["agvm_start"]}; seeds {args.seeds}; load average before '
          f'{load_before}')
    if p['large_steps'] < 150:
        print(f'note: the large arms take {p["large_steps"]} optimizer '
              f'steps, fewer than the 150 the benchmark is meant for')
    torch.set_num_threads(max(args.threads, 1))
    pretrained_backbone(args)
    gate_arm = 'large-sqrt' if args.agvm_lr == 'sqrt' else 'large-linear'
    init = measure_drift(args, fresh_model(args, args.seeds[0],
                                           pretrained_backbone(args)))
    at_start = measure_drift(args, train(args, gate_arm, args.seeds[0],
                                         stop=p['agvm_start']))
    print_drift('at initialisation (pre-trained backbone, fresh heads)', init)
    print_drift(f'at AGVM start (micro-batch {p["agvm_start"]} of '
                f'{gate_arm}, seed {args.seeds[0]})', at_start)
    testable, modules = gate_verdict(at_start)
    for m in modules:
        print(f"  {m['name']}: d_backbone/d_i {m['small'][0]:.2f} -> "
              f"{m['large'][0]:.2f} (x{m['drift']:.2f}) from N="
              f"{at_start['small']['batch_size']} to "
              f"{at_start['large']['batch_size']}: "
              f"{'drift' if m['present'] else 'no drift'}")
    if testable:
        print('GATE: the variance drift AGVM corrects is present at its '
              'start, within the clamp range: the arms test its claim.')
    else:
        print('GATE: no drift of d_backbone/d_i with the batch within the '
              'clamp range at AGVM\'s start: the claim is not testable in '
              'this setting, and no verdict on AGVM is given.')
    runs = train_all(args)
    summary = summarize_arms(runs, args)
    wall = time.perf_counter() - start
    floor = background_floor(
        scenes(args.val_images, args.image_size, VAL_SEED, args.device)[1])
    print(f'\n{"arm":<13}{"batch":>6}{"lr":>8}{"steps":>7}'
          f'{"mIoU mean +- std":>20}  per seed{"":<14}{"val loss":>16}'
          f'{"train loss":>11}{"s/run":>7}{"data":>6}')
    for arm, s in summary.items():
        batch = args.batch * (1 if arm == 'small' else args.k)
        seeds = ' '.join(f'{v:.3f}' for v in s['per_seed'])
        print(f"{arm:<13}{batch:>6}{s['lr']:>8.3g}{s['steps']:>7}"
              f"{s['miou'][0]:>12.3f} +- {s['miou'][1]:.3f}  {seeds:<22}"
              f"{s['val_loss'][0]:>8.3f} +- {s['val_loss'][1]:.3f}"
              f"{s['final_loss']:>11.3f}{s['seconds']:>7.0f}"
              f"{s['data_share']:>6.0%}")
    print(f'(mIoU of predicting background everywhere: {floor:.3f}; train '
          f'loss: mean of the last epoch)')
    plain = 'large-sqrt' if args.agvm_lr == 'sqrt' else 'large-linear'
    verdict = {}
    if {'small', plain, 'large-agvm'} <= set(summary):
        verdict = agvm_verdict(summary, plain, testable)
        diffs, gap, closed = (verdict[k] for k in ('paired', 'gap',
                                                   'closed'))
        share = (f'share of it closed {closed:.0%}' if gap > 0 else
                 'no gap to close')
        print(f'\nlarge-agvm minus {plain}, paired by seed: '
              f"{' '.join(f'{d:+.3f}' for d in diffs)} (mean "
              f"{verdict['paired_mean']:+.3f} +- {verdict['paired_std']:.3f})"
              f'; small minus {plain} (the gap) {gap:+.3f} mIoU; {share}; '
              f'val loss, AGVM minus {plain}: '
              f"{' '.join(f'{d:+.4f}' for d in verdict['paired_val_loss'])}")
        if not testable:
            print('(no verdict: the gate found no drift for AGVM to act on)')
    for run in runs:
        if run['agvm']:
            last = run['agvm'][-1]
            print(f"AGVM seed {run['seed']}: {len(run['agvm'])} re-estimates;"
                  f" last d_i {[round(v, 4) for v in last['d']]}, factors "
                  f"{[round(v, 3) for v in last['s']]}")
    print(f'\n{len(runs)} runs, {args.jobs} at a time, {wall / 60:.1f} min '
          f'wall; load average before {load_before}, after '
          f'{load_average()}; data from memory (compute-bound)')
    if args.json:
        print(json.dumps(dict(
            args=vars(args), plan=p, load_before=load_before,
            load_after=load_average(), wall_seconds=wall,
            drift_init=init, drift_start=at_start,
            gate=dict(testable=testable, modules=modules), summary=summary,
            background_floor=floor,
            verdict=verdict, runs=runs)))


if __name__ == '__main__':
    main()
