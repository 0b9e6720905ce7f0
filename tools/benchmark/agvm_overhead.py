"""Per-step time of AGVM vs mmengine's plain OptimWrapper, side by side.

Usage: python tools/benchmark/agvm_overhead.py
[--config configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py]
[--steps 20] [--warmup 2] [--update-interval 10] [--depth 18]
[--batch-size 2] [--nprocs 1 2] [--device cpu|cuda]

Two copies of one model, one trained with the plain wrapper, one with AGVM
(the same SGD settings), on the same pre-loaded batches at every step (so
the run is compute-bound: no data wait); the AGVM copy starts every step
from the plain copy's weights, so both do the same work (a detector's RoI
count depends on its weights). The two alternate step by step (and which
goes first) so load changes on the machine hit both alike. One process:
both accumulate 2 micro-batches per step (AGVM's halves). N processes
(DDP): no accumulation, AGVM's halves are the ranks; the plain copy
reduces with DDP's stock all-reduce, the AGVM copy through AGVM's
communication hook. With ``--device cuda`` and N processes:
NCCL when there are N GPUs, else gloo with every rank on GPU 0.

Printed per setting: mean seconds per optimizer step of each (re-estimation
steps included, so the cost is amortised over update_interval), the ratio of
the means and of the medians, and AGVM's own work per step from
instrumenting it: ``update_factors`` (the statistics exchange and the
factor update), the first half's snapshot in one process, and the
per-bucket work of the hook (half reduction, per-module norms), including
the parts that overlap with the backward pass. Its share of the plain step
is the figure least sensitive to other load on the machine. The load
average (``uptime``) is printed before and after.
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

from mmext.testing import run_processes
from mmext.testing.timing import WorkTimer

# AGVM's own work; nested calls (the flat fallback's reduction inside
# update_factors) are counted once.
_WRAPPER_WORK = ['update_factors']
_HALVES_WORK = ['after_backward', 'share_half_sum', 'measure_sum']


def _device(args, rank, backend):
    if args.device == 'cpu':
        return torch.device('cpu')
    return torch.device('cuda', rank if backend == 'nccl' else 0)


def _load(args, rank, device):
    cfg = Config.fromfile(args.config)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    cfg.model.backbone.update(depth=args.depth, init_cfg=None)
    if args.depth < 50:
        cfg.model.neck.in_channels = [64, 128, 256, 512]
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(MODELS.build(cfg.model).to(device))
    loader_cfg = cfg.train_dataloader
    loader_cfg.update(batch_size=args.batch_size, num_workers=0,
                      persistent_workers=False)
    loader = Runner.build_dataloader(loader_cfg, seed=rank)
    batches = []
    while len(batches) < args.num_batches:
        batches.extend(loader)
    return cfg, models, batches[:args.num_batches]


def _wrappers(cfg, models, accumulative_counts, update_interval):
    optimizer = dict(type='SGD', lr=0.001, momentum=0.9, weight_decay=1e-4)
    plain = build_optim_wrapper(models[0], dict(
        type='OptimWrapper', optimizer=optimizer,
        accumulative_counts=accumulative_counts))
    agvm_cfg = cfg.optim_wrapper.to_dict()
    agvm_cfg.update(optimizer=optimizer,
                    accumulative_counts=accumulative_counts,
                    update_interval=update_interval, start_iter=0,
                    clip_grad=None, clip_grad_window=None)
    agvm = build_optim_wrapper(models[1], agvm_cfg)
    return plain, agvm


@torch.no_grad()
def _copy_weights(source, target):
    """Parameters and buffers of ``source`` into ``target`` (in place)."""
    for mine, theirs in zip(target.state_dict().values(),
                            source.state_dict().values()):
        mine.copy_(theirs)


def _synchronize(device):
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def _bench(rank, world_size, args, result_path, backend=None):
    device = _device(args, rank, backend)
    cfg, models, batches = _load(args, rank, device)
    counts = 2 if world_size == 1 else 1
    if world_size > 1:
        device_ids = [device.index] if backend == 'nccl' else None
        models = [
            MMDistributedDataParallel(module=m, device_ids=device_ids,
                                      broadcast_buffers=False)
            for m in models
        ]
    plain, agvm = _wrappers(cfg, models, counts, args.update_interval)
    timer = WorkTimer()
    timer.instrument(agvm, _WRAPPER_WORK)
    timer.instrument(agvm.halves, _HALVES_WORK)
    times = {'plain': [], 'agvm': []}
    batch_iter = iter(batches * 1000)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            timer.seconds.clear()
        # Both wrappers train on the same batches (box counts, and so the
        # RoI work, differ between images).
        step_batches = [next(batch_iter) for _ in range(counts)]
        _copy_weights(models[0], models[1])
        order = [('plain', plain, models[0]), ('agvm', agvm, models[1])]
        for name, wrapper, model in (order if step % 2 else order[::-1]):
            _synchronize(device)
            if world_size > 1:
                dist.barrier()
            start = time.perf_counter()
            for data in step_batches:
                model.train_step(data, optim_wrapper=wrapper)
            _synchronize(device)
            if step >= args.warmup:
                times[name].append(time.perf_counter() - start)
    if rank == 0:
        torch.save(dict(times=times, agvm_work=timer.seconds,
                        hooked=agvm.uses_comm_hook(models[1])),
                   result_path)


def _run(world_size, args):
    path = f'/tmp/agvm_overhead_{os.getpid()}_{world_size}.pth'
    backend = None
    if world_size == 1:
        _bench(0, 1, args, path)
    else:
        backend = ('nccl' if args.device == 'cuda'
                   and torch.cuda.device_count() >= world_size else 'gloo')
        run_processes(_bench, world_size, (args, path, backend),
                      backend=backend)
    result = torch.load(path, weights_only=False)
    os.remove(path)
    result['backend'] = backend
    return result


def _load_average():
    return ' '.join(f'{x:.2f}' for x in os.getloadavg())


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
    parser.add_argument('--device', choices=['cpu', 'cuda'], default='cpu')
    args = parser.parse_args()
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: torch sees no CUDA device')
    args.num_batches = 8
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(args.nprocs)))
    print(f'config {args.config}, ResNet-{args.depth}, batch {args.batch_size}'
          f' per process, {args.steps} timed steps per wrapper, '
          f'update_interval {args.update_interval}, device {args.device}; '
          f'batches pre-loaded (compute-bound, no data wait)')
    print(f'load average (1, 5, 15 min) before: {_load_average()}')
    print(f'{"setting":<26}{"eff. batch":>11}{"plain s/step":>13}'
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
        work = sum(result['agvm_work']) / len(times['agvm'])
        if world_size == 1:
            setting = '1 process, 2 accum.'
        else:
            exchange = 'hook' if result['hooked'] else 'flat'
            setting = f'{world_size} proc {result["backend"]} {exchange}'
        # Loader batch x world size x accumulative_counts (2 in 1 process).
        batch = args.batch_size * max(world_size, 2)
        print(f'{setting:<26}{batch:>11}{plain:>13.3f}{agvm:>13.3f}'
              f'{agvm / plain:>8.3f}'
              f'{median_ratio:>14.3f}{work:>18.4f}{work / plain:>8.2%}')
    print(f'load average (1, 5, 15 min) after: {_load_average()}')


if __name__ == '__main__':
    main()
