"""Per-step time of AGVM vs mmengine's plain OptimWrapper, side by side.

Usage: python tools/benchmark/agvm_overhead.py
[--config configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py]
[--steps 20] [--warmup 2] [--update-interval 10] [--depth 18]
[--batch-size 2] [--nprocs 1 2]

One model, two optimizer wrappers over its parameters (plain and AGVM, the
same SGD settings), the same pre-loaded batches at every step; the wrappers
alternate step by step (and which goes first) so load changes on the
machine hit both alike. One process: both accumulate 2 micro-batches per step (AGVM's halves).
N processes (gloo DDP): no accumulation, AGVM's halves are the ranks.
Printed per setting: mean seconds per optimizer step of each (re-estimation
steps included, so the cost is amortised over update_interval), the ratio of
the means and of the medians, and the time spent inside AGVM's
re-estimation (``_update_factors``, including its reduction, which replaces
DDP's on those steps) per step, from instrumenting the wrapper.
"""
import argparse
import os
import statistics
import time

import mmext  # noqa: F401
import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, init_default_scope
from mmengine.runner import Runner

from mmext.testing import run_gloo_processes


def _load(args, rank):
    cfg = Config.fromfile(args.config)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    cfg.model.backbone.update(depth=args.depth, init_cfg=None)
    if args.depth < 50:
        cfg.model.neck.in_channels = [64, 128, 256, 512]
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    loader_cfg = cfg.train_dataloader
    loader_cfg.update(batch_size=args.batch_size, num_workers=0,
                      persistent_workers=False)
    loader = Runner.build_dataloader(loader_cfg, seed=rank)
    batches = []
    while len(batches) < args.num_batches:
        batches.extend(loader)
    return cfg, model, batches[:args.num_batches]


def _wrappers(cfg, model, accumulative_counts, update_interval):
    optimizer = dict(type='SGD', lr=0.001, momentum=0.9, weight_decay=1e-4)
    plain = build_optim_wrapper(model, dict(
        type='OptimWrapper', optimizer=optimizer,
        accumulative_counts=accumulative_counts))
    agvm_cfg = cfg.optim_wrapper.to_dict()
    agvm_cfg.update(optimizer=optimizer,
                    accumulative_counts=accumulative_counts,
                    update_interval=update_interval, start_iter=0,
                    clip_grad=None, clip_grad_window=None)
    agvm = build_optim_wrapper(model, agvm_cfg)
    return plain, agvm


def _instrument(wrapper, name, timings):
    """Accumulate the wall time of ``wrapper.<name>`` into ``timings``."""
    original = getattr(wrapper, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            timings.append(time.perf_counter() - start)

    setattr(wrapper, name, timed)


def _bench(rank, world_size, args, result_path):
    cfg, model, batches = _load(args, rank)
    counts = 2 if world_size == 1 else 1
    if world_size > 1:
        model = MMDistributedDataParallel(module=model, device_ids=None,
                                          broadcast_buffers=False)
    plain, agvm = _wrappers(cfg, model, counts, args.update_interval)
    agvm_work = []
    _instrument(agvm, '_update_factors', agvm_work)
    times = {'plain': [], 'agvm': []}
    batch_iter = iter(batches * 1000)
    for step in range(args.warmup + args.steps):
        # Both wrappers train on the same batches (box counts, and so the
        # RoI work, differ between images).
        step_batches = [next(batch_iter) for _ in range(counts)]
        order = [('plain', plain), ('agvm', agvm)]
        for name, wrapper in (order if step % 2 else order[::-1]):
            if world_size > 1:
                dist.barrier()
            start = time.perf_counter()
            for data in step_batches:
                model.train_step(data, optim_wrapper=wrapper)
            if step >= args.warmup:
                times[name].append(time.perf_counter() - start)
    if rank == 0:
        torch.save(dict(times=times, agvm_work=agvm_work), result_path)


def _run(world_size, args):
    path = f'/tmp/agvm_overhead_{os.getpid()}_{world_size}.pth'
    if world_size == 1:
        _bench(0, 1, args, path)
    else:
        run_gloo_processes(_bench, world_size, (args, path))
    result = torch.load(path, weights_only=False)
    os.remove(path)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--config',
        default='configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py')
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--update-interval', type=int, default=10)
    parser.add_argument('--depth', type=int, default=18)
    parser.add_argument('--batch-size', type=int, default=2)
    parser.add_argument('--nprocs', type=int, nargs='+', default=[1, 2])
    args = parser.parse_args()
    args.num_batches = 8
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(args.nprocs)))
    print(f'config {args.config}, ResNet-{args.depth}, batch {args.batch_size}'
          f' per process, {args.steps} timed steps per wrapper, '
          f'update_interval {args.update_interval}')
    print(f'{"setting":<22}{"eff. batch":>11}{"plain s/step":>13}'
          f'{"AGVM s/step":>13}'
          f'{"ratio":>8}{"median ratio":>14}{"AGVM work s/step":>18}'
          f'{"share":>8}')
    for world_size in args.nprocs:
        result = _run(world_size, args)
        times = result['times']
        plain = statistics.mean(times['plain'])
        agvm = statistics.mean(times['agvm'])
        median_ratio = (statistics.median(times['agvm']) /
                        statistics.median(times['plain']))
        work = sum(result['agvm_work']) / len(result['times']['agvm'])
        setting = ('1 process, 2 accum.' if world_size == 1 else
                   f'{world_size} processes DDP')
        # Loader batch x world size x accumulative_counts (2 in 1 process).
        batch = args.batch_size * max(world_size, 2)
        print(f'{setting:<22}{batch:>11}{plain:>13.3f}{agvm:>13.3f}'
              f'{agvm / plain:>8.3f}'
              f'{median_ratio:>14.3f}{work:>18.4f}{work / plain:>8.2%}')


if __name__ == '__main__':
    main()
