"""Small batch vs large batch vs large batch with AGVM, same epochs, seeds.

Usage: python tools/benchmark/agvm_large_batch.py [--epochs 8] [--k 2]
    [--batch 4] [--lr 0.04] [--warmup-epochs 2] [--seeds 0 1 2]
    [--arms small large agvm] [--train-images 64] [--val-images 32]
    [--full-size] [--device cpu] [--jobs 1] [--json]
    [--work-dir work_dirs/agvm_large_batch]

The detector of ``configs/demo/faster-rcnn_r18_fpn_demo-det.py`` (Faster
R-CNN, ResNet-18 FPN, 128 px, no pretrained weights; by default its light
variant ``LIGHT``, see ``--full-size``) trains on a generated demo detection
set (``tools/make_demo_data.py --only det``, made on first use
under ``data/demo_large_<train>x<val>``) in three arms with the same number
of epochs and the same images per LR schedule point:

  small: batch B, lr;
  large: batch k * B by accumulating k micro-batches of B, lr * k (linear
         scaling rule);
  agvm:  as large, with ``mmext.AGVMOptimWrapper`` (halves = the first and
         the second k/2 micro-batches of each step, re-estimated every step
         from the end of the warm-up).

Every arm warms the LR up linearly over ``--warmup-epochs`` (counted in
images, so the same image sees the same LR in every arm),
divides it by 10 for the last quarter of the epochs, and clips the gradient
norm at ``--clip-norm``. Each arm trains once per seed (the seed fixes the
initialisation and the image order, the same for every arm); ``--jobs N``
trains N runs at a time in separate processes, each with cores / N torch
threads (small detectors use 2 cores better as 2 processes). Printed: the
final COCO bbox mAP (val split) as mean +- std over the seeds, the mean
training loss per epoch, wall time per run and the share of it spent
waiting for data. ``--json`` prints all of it as one JSON line at the end.
"""
import argparse
import concurrent.futures
import json
import math
import multiprocessing
import os
import os.path as osp
import statistics
import subprocess
import sys
import time

import torch

from mmext.agvm import summarize
from mmext.cli import build_runner, load_run_config
from mmext.testing.timing import RunRecorder

ARMS = ('small', 'large', 'agvm')

# --light: the demo Faster R-CNN with 64-channel FPN/RPN, a 256-wide box head
# and fewer proposals/RoIs (128 px images hold at most 3 objects).
LIGHT = {
    'model.neck.out_channels': 64,
    'model.rpn_head.in_channels': 64,
    'model.rpn_head.feat_channels': 64,
    'model.roi_head.bbox_roi_extractor.out_channels': 64,
    'model.roi_head.bbox_head.in_channels': 64,
    'model.roi_head.bbox_head.fc_out_channels': 256,
    'model.train_cfg.rpn_proposal.nms_pre': 500,
    'model.train_cfg.rpn_proposal.max_per_img': 200,
    'model.train_cfg.rcnn.sampler.num': 128,
    'model.test_cfg.rpn.nms_pre': 500,
    'model.test_cfg.rpn.max_per_img': 200,
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--config',
                        default='configs/demo/faster-rcnn_r18_fpn_demo-det.py')
    parser.add_argument('--epochs', type=int, default=8)
    parser.add_argument('--batch', type=int, default=4,
                        help='small batch B (images per micro-batch)')
    parser.add_argument('--k', type=int, default=2,
                        help='large batch = k x B, k even (AGVM halves)')
    parser.add_argument('--lr', type=float, default=0.04,
                        help='small-batch SGD lr; the large arms use k x lr')
    parser.add_argument('--warmup-epochs', type=int, default=2,
                        help='epochs of linear LR warm-up (from lr / 10)')
    parser.add_argument('--clip-norm', type=float, default=10.0,
                        help='gradient norm clip of every arm, 0 for none')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--arms', nargs='+', choices=ARMS, default=ARMS)
    parser.add_argument('--train-images', type=int, default=64)
    parser.add_argument('--val-images', type=int, default=32)
    parser.add_argument('--full-size', action='store_true',
                        help='the demo detector as configured (default: '
                        'the light variant, about 2.5x cheaper per image)')
    parser.add_argument('--image-size', type=int, default=128,
                        help='resize scale of the detector (the generated '
                        'images are 128 px)')
    parser.add_argument('--workers', type=int, default=1,
                        help='dataloader workers per run')
    parser.add_argument('--device', choices=['cpu', 'cuda'], default='cpu')
    parser.add_argument('--jobs', type=int, default=1,
                        help='runs trained at a time, each in its own '
                        'process with cores / jobs torch threads')
    parser.add_argument('--work-dir', default='work_dirs/agvm_large_batch')
    parser.add_argument('--json', action='store_true')
    args = parser.parse_args(argv)
    if args.k < 2 or args.k % 2:
        parser.error(f'--k must be even and >= 2 (AGVM compares the first '
                     f'and second k/2 micro-batches), got {args.k}')
    for option in ('epochs', 'batch', 'train_images', 'val_images', 'jobs'):
        if getattr(args, option) < 1:
            parser.error(f'--{option.replace("_", "-")} must be >= 1, got '
                         f'{getattr(args, option)}')
    if args.train_images < args.k * args.batch:
        parser.error(f'--train-images ({args.train_images}) must hold at '
                     f'least one large batch of --k x --batch = '
                     f'{args.k * args.batch} images, or the large arms take '
                     f'no optimizer step')
    if not 1 <= args.warmup_epochs < args.epochs:
        parser.error(f'--warmup-epochs must be >= 1 and below --epochs '
                     f'({args.epochs}), got {args.warmup_epochs}')
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: no CUDA device is visible')
    if args.device == 'cpu' and torch.cuda.is_available():
        parser.error('--device cpu on a machine with CUDA: hide the GPUs '
                     '(CUDA_VISIBLE_DEVICES=) or pass --device cuda')
    return args


def demo_det_root(args) -> str:
    """The generated detection set of the requested size, made if missing."""
    out = osp.join('data', f'demo_large_{args.train_images}x'
                   f'{args.val_images}')
    root = osp.join(out, 'det') + '/'
    if not osp.exists(osp.join(root, 'annotations', 'val.json')):
        subprocess.run([
            sys.executable, 'tools/make_demo_data.py', '--out', out,
            '--only', 'det', '--det-train', str(args.train_images),
            '--det-val', str(args.val_images)
        ], check=True)
    return root


def make_config(args, arm: str, seed: int, data_root: str):
    """The run config of one arm and seed."""
    cfg = load_run_config(args.config, None if args.full_size else LIGHT,
                          osp.join(args.work_dir, f'{arm}_seed{seed}'))
    for loader in (cfg.train_dataloader, cfg.val_dataloader):
        loader.dataset.data_root = data_root
        loader.num_workers = args.workers
        loader.persistent_workers = args.workers > 0
        for transform in loader.dataset.pipeline:
            if transform.type == 'Resize':
                transform.scale = (args.image_size, args.image_size)
    cfg.train_dataloader.batch_size = args.batch
    cfg.val_evaluator.ann_file = data_root + 'annotations/val.json'
    cfg.test_dataloader = cfg.val_dataloader
    cfg.test_evaluator = cfg.val_evaluator
    cfg.train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=args.epochs,
                         val_interval=10**6)
    warmup_iters = args.warmup_epochs * math.ceil(args.train_images /
                                                  args.batch)
    cfg.param_scheduler = [
        dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
             end=warmup_iters),
        dict(type='MultiStepLR', by_epoch=True, begin=0, end=args.epochs,
             milestones=[math.ceil(0.75 * args.epochs)], gamma=0.1)
    ]
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook',
                                        interval=10**6)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=10)
    cfg.randomness = dict(seed=seed)
    k = 1 if arm == 'small' else args.k
    optim = dict(
        type='OptimWrapper',
        optimizer=dict(type='SGD', lr=args.lr * k, momentum=0.9,
                       weight_decay=1e-4),
        accumulative_counts=k)
    if args.clip_norm > 0:
        optim['clip_grad'] = dict(max_norm=args.clip_norm)
    if arm == 'agvm':
        optim.update(type='mmext.AGVMOptimWrapper',
                     constructor='mmext.AGVMOptimWrapperConstructor',
                     update_interval=1, start_iter=warmup_iters)
    cfg.optim_wrapper = optim
    return cfg


def train_once(args, arm: str, seed: int, data_root: str) -> dict:
    cfg = make_config(args, arm, seed, data_root)
    runner = build_runner(cfg)
    recorder = RunRecorder()
    runner.register_hook(recorder)
    start = time.perf_counter()
    runner.train()
    seconds = time.perf_counter() - start
    wrapper = runner.optim_wrapper
    return dict(
        arm=arm, seed=seed,
        bbox_mAP=recorder.metrics.get('coco/bbox_mAP', math.nan),
        bbox_mAP_50=recorder.metrics.get('coco/bbox_mAP_50', math.nan),
        epoch_losses=recorder.epoch_losses(),
        seconds=seconds,
        steps=runner.iter // cfg.optim_wrapper['accumulative_counts'],
        data_wait_share=recorder.data_seconds / max(recorder.iter_seconds,
                                                    1e-9),
        agvm_factors=getattr(wrapper, 'factors', None))


def train_all(args, data_root: str) -> list:
    """Every (arm, seed) run, ``args.jobs`` processes at a time."""
    pairs = [(arm, seed) for seed in args.seeds for arm in args.arms]
    if args.jobs == 1:
        return [train_once(args, arm, seed, data_root) for arm, seed in pairs]
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    with concurrent.futures.ProcessPoolExecutor(
            args.jobs, mp_context=multiprocessing.get_context('spawn'),
            initializer=torch.set_num_threads,
            initargs=(threads, )) as pool:
        futures = [pool.submit(train_once, args, arm, seed, data_root)
                   for arm, seed in pairs]
        return [f.result() for f in futures]


def summarize_arms(runs, arms):
    summary = {}
    for arm in arms:
        mine = [r for r in runs if r['arm'] == arm]
        curves = list(zip(*[r['epoch_losses'] for r in mine]))
        summary[arm] = dict(
            bbox_mAP=summarize([r['bbox_mAP'] for r in mine]),
            bbox_mAP_50=summarize([r['bbox_mAP_50'] for r in mine]),
            loss_curve=[statistics.fmean(epoch) for epoch in curves],
            seconds=statistics.fmean(r['seconds'] for r in mine),
            steps=mine[0]['steps'],
            data_wait_share=statistics.fmean(r['data_wait_share']
                                             for r in mine))
    return summary


def uptime() -> str:
    try:
        with open('/proc/loadavg') as f:
            return 'load average ' + ' '.join(f.read().split()[:3])
    except OSError:
        return 'load average unknown'


def main():
    args = parse_args()
    data_root = demo_det_root(args)
    load_before = uptime()
    start = time.perf_counter()
    runs = train_all(args, data_root)
    wall_seconds = time.perf_counter() - start
    summary = summarize_arms(runs, args.arms)
    print(f'\n{args.config} on {data_root} ({args.train_images} train / '
          f'{args.val_images} val images, {args.image_size} px), '
          f'{args.epochs} epochs ({args.warmup_epochs} of warm-up), small '
          f'batch {args.batch} at lr {args.lr}, large batch '
          f'{args.k * args.batch} at lr {args.k * args.lr}, seeds '
          f'{args.seeds}, {args.device}; {len(runs)} runs, {args.jobs} at a '
          f'time: {wall_seconds / 60:.1f} min; {load_before} before, '
          f'{uptime()} after')
    print(f'{"arm":<7}{"bbox mAP":>18}{"mAP@0.5":>18}{"steps":>7}'
          f'{"s/run":>8}{"data wait":>11}  per seed mAP')
    for arm, s in summary.items():
        per_seed = ' '.join(f'{r["bbox_mAP"]:.3f}' for r in runs
                            if r['arm'] == arm)
        print(f'{arm:<7}{s["bbox_mAP"][0]:>10.3f} +-{s["bbox_mAP"][1]:.3f}'
              f'{s["bbox_mAP_50"][0]:>10.3f} +-{s["bbox_mAP_50"][1]:.3f}'
              f'{s["steps"]:>7d}{s["seconds"]:>8.0f}'
              f'{s["data_wait_share"]:>10.0%}  {per_seed}')
    print('\nmean training loss per epoch (over seeds)')
    print(f'{"epoch":<7}' + ''.join(f'{arm:>9}' for arm in summary))
    for epoch in range(args.epochs):
        print(f'{epoch + 1:<7}' + ''.join(
            f'{s["loss_curve"][epoch]:>9.3f}' for s in summary.values()))
    for run in runs:
        if run['agvm_factors']:
            factors = ', '.join(f'{k} {v:.2f}'
                                for k, v in run['agvm_factors'].items())
            print(f'AGVM factors at the end, seed {run["seed"]}: {factors}')
    if args.json:
        print(json.dumps(dict(args=vars(args), load_before=load_before,
                              load_after=uptime(), wall_seconds=wall_seconds,
                              summary=summary, runs=runs)))


if __name__ == '__main__':
    main()
