"""Small-batch SGD vs large-batch SGD vs large-batch AGVM, same epochs.

Usage: python tools/benchmark/agvm_large_batch.py
[--config configs/agvm/faster-rcnn_r50_fpn_agvm_coco128-cpu.py]
[--epochs 1] [--scale 4] [--depth 18] [--image-size 320] [--work-dir DIR]

Three trainings of the config's detector on its data, one after the other:
  small: the config's batch B, plain OptimWrapper, lr;
  large: batch B * scale through ``scale`` accumulated micro-batches, plain
         OptimWrapper, lr * scale (linear scaling rule);
  agvm:  the same large batch and lr with the config's AGVM wrapper (halves =
         the first and second half of the micro-batches).
Printed: wall time (training and the final validation), optimizer steps,
effective batch (loader batch x world size x accumulative_counts) and bbox
mAP (COCO, val split) of each.
A one-process stand-in for the paper's multi-GPU comparison: on a CPU only a
few epochs fit, so read the mAPs as a smoke test of the recipe, not of AGVM.
"""
import argparse
import os.path as osp
import time

import mmext  # noqa: F401
from mmengine.hooks import Hook

from mmext.runner import build_runner, load_run_config


class _LastMetrics(Hook):
    """Keeps the metrics of the last validation (run after the last
    epoch by mmengine's EpochBasedTrainLoop)."""

    def __init__(self):
        self.metrics = {}

    def after_val_epoch(self, runner, metrics=None):
        self.metrics = metrics or {}


def _configure(args, mode):
    cfg = load_run_config(args.config, None, osp.join(args.work_dir, mode))
    cfg.model.backbone.update(depth=args.depth, init_cfg=None)
    if args.depth < 50:
        cfg.model.neck.in_channels = [64, 128, 256, 512]
    for pipeline in (cfg.train_dataloader.dataset.pipeline,
                     cfg.val_dataloader.dataset.pipeline):
        for transform in pipeline:
            if transform.type == 'Resize':
                transform.scale = (args.image_size, args.image_size)
    cfg.train_cfg.update(max_epochs=args.epochs, val_interval=10**6)
    cfg.param_scheduler = [
        dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
             end=args.warmup_iters)
    ]
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook',
                                        interval=10**6)
    cfg.randomness = dict(seed=0)
    optim = cfg.optim_wrapper
    base_lr = optim.optimizer.lr
    if mode == 'small':
        cfg.optim_wrapper = dict(type='OptimWrapper',
                                 optimizer=optim.optimizer)
        return cfg
    optim.optimizer.lr = base_lr * args.scale
    optim.accumulative_counts = args.scale
    if mode == 'large':
        cfg.optim_wrapper = dict(type='OptimWrapper',
                                 optimizer=optim.optimizer,
                                 accumulative_counts=args.scale)
    else:
        optim.update(start_iter=args.warmup_iters,
                     clip_grad_window=(0, args.warmup_iters))
    return cfg


def _train(args, mode):
    cfg = _configure(args, mode)
    runner = build_runner(cfg)
    last = _LastMetrics()
    runner.register_hook(last)
    start = time.perf_counter()
    runner.train()
    seconds = time.perf_counter() - start
    counts = cfg.optim_wrapper.get('accumulative_counts', 1)
    batch = cfg.train_dataloader.batch_size * runner.world_size * counts
    return (seconds, runner.iter // counts, batch,
            last.metrics.get('coco/bbox_mAP', float('nan')))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--config',
        default='configs/agvm/faster-rcnn_r50_fpn_agvm_coco128-cpu.py')
    parser.add_argument('--epochs', type=int, default=1)
    parser.add_argument('--scale', type=int, default=4,
                        help='large batch = scale x small batch (even)')
    parser.add_argument('--depth', type=int, default=18)
    parser.add_argument('--image-size', type=int, default=320)
    parser.add_argument('--warmup-iters', type=int, default=8)
    parser.add_argument('--work-dir', default='work_dirs/agvm_large_batch')
    args = parser.parse_args()
    results = {mode: _train(args, mode) for mode in ('small', 'large', 'agvm')}
    print(f'\n{args.config}: ResNet-{args.depth}, {args.image_size} px, '
          f'{args.epochs} epoch(s), large batch = {args.scale} x small')
    print(f'{"run":<8}{"time s":>9}{"steps":>7}{"eff. batch":>11}'
          f'{"bbox mAP":>10}')
    for mode, (seconds, steps, batch, bbox_map) in results.items():
        print(f'{mode:<8}{seconds:>9.0f}{steps:>7d}{batch:>11d}'
              f'{bbox_map:>10.3f}')


if __name__ == '__main__':
    main()
