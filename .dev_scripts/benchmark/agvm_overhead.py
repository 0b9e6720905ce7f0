"""Per-step time of AGVM vs mmengine's plain OptimWrapper, side by side.

Usage, from the project root (``bench_utils`` of ``tools/benchmark``, imported
through ``tool_modules``): python .dev_scripts/benchmark/agvm_overhead.py
[--config configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py]
[--steps 20] [--warmup 2] [--update-interval 10] [--depth 18]
[--batch-size 2] [--nprocs 1 4] [--device cpu|cuda] [--json]

Two copies of one model, plain and AGVM, alternate step by step on the same
pre-loaded batches, the AGVM copy restarted from the plain copy's weights
every step. One process accumulates AGVM's 2 halves; N processes run DDP
(AGVM's halves are the ranks). ``--steps`` must be a multiple of
``--update-interval``. Printed per setting: mean s/step of each, the ratio
of the means and medians, AGVM's extra time per ordinary, re-estimation and
amortised step with its share, and the time in ``update_factors``; the load
average before and after. Setting and figures: docs/en/benchmarks.md
(Overhead of AGVM per optimizer step).
"""
import argparse
import json
import os
import os.path as osp
import statistics
import tempfile
import time

import mmext  # noqa: F401
import tool_modules  # noqa: F401  (bench_utils, without PYTHONPATH)
import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, init_default_scope
from mmengine.runner import Runner

from bench_utils import WorkTimer, run_processes


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
    return plain, build_optim_wrapper(models[1], agvm_cfg)


@torch.no_grad()
def _copy_weights(source, target):
    """Parameters and buffers of ``source`` into ``target`` (in place)."""
    for mine, theirs in zip(target.state_dict().values(),
                            source.state_dict().values()):
        mine.copy_(theirs)


def _synchronize(device):
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def threads_per_rank(world_size: int) -> int:
    """Cores / ranks, at least 1: the same compute per row."""
    return max(1, (os.cpu_count() or 1) // world_size)


def _bench(rank, world_size, args, result_path, backend=None):
    torch.set_num_threads(threads_per_rank(world_size))
    device = (torch.device('cpu') if args.device == 'cpu' else
              torch.device('cuda', rank if backend == 'nccl' else 0))
    cfg, models, batches = _load(args, rank, device)
    counts = 2 if world_size == 1 else 1
    if world_size > 1:
        device_ids = [device.index] if backend == 'nccl' else None
        models = [MMDistributedDataParallel(module=m, device_ids=device_ids,
                                            broadcast_buffers=False)
                  for m in models]
    plain, agvm = _wrappers(cfg, models, counts, args.update_interval)
    # The re-estimate, through the wrapper's public method.
    timer = WorkTimer()
    timer.instrument(agvm, ['update_factors'])
    times = {'plain': [], 'agvm': []}
    kinds, update_seconds = [], []
    batch_iter = iter(batches * 1000)
    for step in range(args.warmup + args.steps):
        # Both wrappers train on the same batches (box counts, and so the
        # RoI work, differ between images).
        step_batches = [next(batch_iter) for _ in range(counts)]
        _copy_weights(models[0], models[1])
        order = [('plain', plain, models[0]), ('agvm', agvm, models[1])]
        for name, wrapper, model in (order if step % 2 else order[::-1]):
            _synchronize(device)
            if world_size > 1:
                dist.barrier()
            calls, updates = len(timer.seconds), agvm.ema.num_updates
            start = time.perf_counter()
            for data in step_batches:
                model.train_step(data, optim_wrapper=wrapper)
            _synchronize(device)
            if step >= args.warmup:
                times[name].append(time.perf_counter() - start)
                if name == 'agvm':
                    kinds.append('estimate' if agvm.ema.num_updates >
                                 updates else 'ordinary')
                    update_seconds.append(sum(timer.seconds[calls:]))
    torch.save(dict(times=times, kinds=kinds, update_factors=update_seconds,
                    hooked=agvm.distributed and agvm.halves.attach(models[1]),
                    params=sum(p.numel() for p in models[1].parameters()),
                    modules=len(agvm.module_names)),
               f'{result_path}.{rank}')


def slowest_rank(ranks: list) -> dict:
    """Per-rank results merged: each time is the slowest rank's."""
    out = dict(ranks[0])
    out['times'] = {name: [max(t) for t in zip(*(r['times'][name]
                                                  for r in ranks))]
                    for name in ranks[0]['times']}
    out['update_factors'] = [max(t) for t in zip(
        *(r['update_factors'] for r in ranks))]
    return out


def _run(world_size, args):
    backend = None
    # Each rank writes its result beside the others' in a private folder.
    with tempfile.TemporaryDirectory(prefix='agvm_overhead_') as folder:
        path = osp.join(folder, 'result.pth')
        if world_size == 1:
            _bench(0, 1, args, path)
        else:
            backend = ('nccl' if args.device == 'cuda'
                       and torch.cuda.device_count() >= world_size else 'gloo')
            run_processes(_bench, world_size, (args, path, backend),
                          backend=backend)
        ranks = [torch.load(f'{path}.{rank}', weights_only=False)
                 for rank in range(world_size)]
    return dict(slowest_rank(ranks), backend=backend)


def _load_average():
    return ' '.join(f'{x:.2f}' for x in os.getloadavg())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--config',
        default='configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py')
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--update-interval', type=int, default=10)
    parser.add_argument('--depth', type=int, default=18)
    parser.add_argument('--batch-size', type=int, default=2)
    parser.add_argument('--nprocs', type=int, nargs='+', default=[1, 4])
    parser.add_argument('--device', choices=['cpu', 'cuda'], default='cpu')
    parser.add_argument('--json', action='store_true')
    args = parser.parse_args(argv)
    for name in ('steps', 'update_interval', 'batch_size'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got '
                         f'{getattr(args, name)}')
    if args.steps % args.update_interval:
        fixed = args.update_interval * max(
            1, round(args.steps / args.update_interval))
        parser.error(f'--steps ({args.steps}) must be a multiple of '
                     f'--update-interval ({args.update_interval}), so the '
                     f'timed steps hold 1 re-estimate per interval; e.g. '
                     f'--steps {fixed}')
    if any(n < 1 for n in args.nprocs):
        parser.error(f'--nprocs must be >= 1, got {args.nprocs}')
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: torch sees no CUDA device')
    return args


def summarize_setting(world_size: int, result: dict, args) -> dict:
    """Per-step figures of one setting from its timings (``times``,
    ``kinds``, ``update_factors``, ``hooked``, ``backend``); AGVM's extra
    time is its step minus the plain step on the same batches."""
    times, kinds = result['times'], result['kinds']
    plain = statistics.mean(times['plain'])
    agvm = statistics.mean(times['agvm'])
    extra = {'ordinary': [], 'estimate': []}
    for kind, mine, theirs in zip(kinds, times['agvm'], times['plain']):
        extra[kind].append(mine - theirs)
    amortised = statistics.mean(extra['ordinary'] + extra['estimate'])
    updates = [s for s, k in zip(result['update_factors'], kinds)
               if k == 'estimate']
    if world_size == 1:
        setting = '1 process, 2 accum.'
    else:
        exchange = 'hook' if result['hooked'] else 'flat'
        setting = f'{world_size} proc {result["backend"]} {exchange}'
    return dict(
        setting=setting,
        # Loader batch x world size x accumulative_counts (2 in 1 process).
        batch=args.batch_size * max(world_size, 2),
        plain=plain, agvm=agvm, ratio=agvm / plain,
        median_ratio=(statistics.median(times['agvm']) /
                      statistics.median(times['plain'])),
        **{kind: statistics.mean(v) if v else 0.0
           for kind, v in extra.items()},  # ordinary, estimate
        amortised=amortised, share=amortised / plain,
        update_factors=statistics.mean(updates) if updates else 0.0,
        update_share=sum(updates) / len(kinds) / plain,
        estimates=len(extra['estimate']),
        threads_per_rank=threads_per_rank(world_size),
        ranks_timed=world_size)


def exchange_note(result: dict, args) -> dict:
    """Where it was measured; what multi-node NCCL adds per re-estimate."""
    return dict(
        measured=f'{args.device}, one host, gloo between processes',
        per_reestimate=dict(
            half_allreduce_bytes=4 * result['params'],
            statistics_allreduce_bytes=8 * 3 * result['modules']),
        multi_node=('with halves of 2+ ranks, one more all-reduce of the '
                    'gradient (inside each half) and one of 3 x M float64 '
                    'per re-estimate, i.e. 1 / update_interval more '
                    'gradient all-reduces per step on average; across '
                    'nodes it costs what one DDP all-reduce of the half '
                    'group costs there'))


def main():
    args = parse_args()
    args.num_batches = 8
    torch.set_num_threads(threads_per_rank(1))
    load_before = _load_average()
    print(f'config {args.config}, ResNet-{args.depth}, batch {args.batch_size}'
          f' per process, {args.steps} timed steps per wrapper, '
          f'update_interval {args.update_interval}, device {args.device}; '
          f'batches pre-loaded (compute-bound, no data wait)')
    print(f'load average (1, 5, 15 min) before: {load_before}')
    print(f'{"setting":<24}{"batch":>6}{"plain s/step":>13}{"AGVM s/step":>12}'
          f'{"ratio":>7}{"median":>8}{"AGVM extra s: ordinary":>24}'
          f'{"estimate":>9}{"amortised":>10}{"share":>7}'
          f'{"update_factors s":>18}{"share":>7}')
    rows, note = [], None
    for world_size in args.nprocs:
        result = _run(world_size, args)
        note = note or exchange_note(result, args)
        row = summarize_setting(world_size, result, args)
        rows.append(row)
        print(f"{row['setting']:<24}{row['batch']:>6}{row['plain']:>13.3f}"
              f"{row['agvm']:>12.3f}{row['ratio']:>7.3f}"
              f"{row['median_ratio']:>8.3f}{row['ordinary']:>24.4f}"
              f"{row['estimate']:>9.4f}{row['amortised']:>10.4f}"
              f"{row['share']:>7.2%}{row['update_factors']:>18.4f}"
              f"{row['update_share']:>7.2%}  ({row['estimates']} "
              f"re-estimates; {row['threads_per_rank']} thread(s) per rank, "
              f"slowest of {row['ranks_timed']} rank(s))")
    load_after = _load_average()
    print(f'load average (1, 5, 15 min) after: {load_after}')
    if args.json:
        print(json.dumps(dict(
            args=vars(args),
            load_before=load_before, load_after=load_after, settings=rows,
            exchange=note)))


if __name__ == '__main__':
    main()
