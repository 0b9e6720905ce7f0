"""Seconds per training iteration of a tiny TimeSformer at each grid shape.

Usage: python tools/benchmark/multigrid_transformer_cost.py
[--embed-dims 96] [--layers 2] [--heads 3] [--batch 2] [--iters 3]
[--rounds 3] [--threads 1] [--json]

Builds mmaction2's TimeSformer recipe
(``timesformer_divST_8xb8-8x32x1-15e_kinetics400-rgb.py``: 8 frames, 224
pixels, patch 16, divided space-time attention) with a reduced width and
depth and no weights, adds mmext's shape adapters (position embeddings
resampled to each shape) and plans the default ``MultigridHook`` on it with
``--batch`` clips per process at the base shape. For every distinct planned
``(B, T, S)`` it times a training iteration (forward, cross-entropy, backward,
SGD step) on random clips held in memory, so the figures are bounded by
compute only (no loader). Shapes are timed round-robin (``--rounds``, each
``--iters`` iterations after one untimed warm-up) so a change of machine load
hits all alike; the median per iteration is printed with its ratio to the
base shape's, the clips per second, and the tokens per clip (``T (S/16)^2``).
B T S^2 is constant across shapes, so equal seconds would mean equal cost per
clip-pixel; the ratio is what a coarse iteration costs against the base one.
"""
import argparse
import json
import os
import os.path as osp
import statistics
import time

import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import mmext  # noqa: F401
from mmext.multigrid import MultigridOptions, MultigridPlan
from mmext.multigrid.shape_probe import planned_shapes, probe_input_size
from mmext.multigrid.transformers import install_shape_adapters

RECIPE = ('recognition/timesformer/timesformer_divST_8xb8-8x32x1-15e_'
          'kinetics400-rgb.py')


def parse_args():
    parser = argparse.ArgumentParser(
        description='Training iteration time of a tiny TimeSformer at each '
        'multigrid shape (CPU, synthetic clips)')
    parser.add_argument('--embed-dims', type=int, default=96)
    parser.add_argument('--layers', type=int, default=2)
    parser.add_argument('--heads', type=int, default=3)
    parser.add_argument('--batch', type=int, default=2,
                        help='clips per process at the base shape')
    parser.add_argument('--iters', type=int, default=3,
                        help='timed iterations per shape and round')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--threads', type=int, default=1,
                        help='torch threads (the machine is shared)')
    parser.add_argument('--json', action='store_true')
    return parser.parse_args()


def build(args):
    """The reduced recipe model (train mode) and its train pipeline."""
    import mmaction
    from mmaction.registry import MODELS
    init_default_scope('mmaction')
    cfg = Config.fromfile(osp.join(osp.dirname(mmaction.__file__), '.mim',
                                   'configs', RECIPE))
    cfg.model.backbone.update(embed_dims=args.embed_dims,
                              num_heads=args.heads,
                              num_transformer_layers=args.layers,
                              pretrained=None)
    cfg.model.cls_head.in_channels = args.embed_dims
    model = MODELS.build(cfg.model).train()
    install_shape_adapters(model)
    return model, list(cfg.train_dataloader.dataset.pipeline)


def time_shape(model, optimizer, shape, pipeline, iters):
    """Median seconds of ``iters`` training iterations at ``shape``."""
    size = probe_input_size(model, shape.batch, shape.clip_len,
                            shape.crop_size, pipeline)
    clips = torch.randn(size)
    labels = torch.randint(0, 400, (shape.batch, ))
    seconds = []
    for _ in range(iters + 1):
        start = time.perf_counter()
        scores = model(clips, mode='tensor', stage='head')
        loss = torch.nn.functional.cross_entropy(scores, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return seconds[1:]


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, pipeline = build(args)
    plan = MultigridPlan(pipeline, args.batch, 15,
                         options=MultigridOptions(bn_base_size=None))
    shapes = planned_shapes(plan)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    load_before = os.getloadavg()
    times = {s: [] for s in shapes}
    for _ in range(args.rounds):
        for shape in shapes:
            times[shape] += time_shape(model, optimizer, shape, pipeline,
                                       args.iters)
    base = next(s for s in shapes if (s.clip_len, s.crop_size) == (
        plan.base_clip_len, plan.base_crop_size))
    base_median = statistics.median(times[base])
    rows = []
    for shape in shapes:
        median = statistics.median(times[shape])
        rows.append(dict(
            batch=shape.batch, clip_len=shape.clip_len,
            crop_size=shape.crop_size, long_cycle=shape.long_cycle,
            tokens_per_clip=shape.clip_len * (shape.crop_size // 16)**2,
            seconds_per_iter=median, ratio_to_base=median / base_median,
            clips_per_second=shape.batch / median,
            bounded_by='compute (synthetic clips in memory, no loader)'))
    meta = dict(model=f'TimeSformer divST, embed_dims={args.embed_dims}, '
                f'{args.layers} layers, {args.heads} heads, 8x224 base',
                batch=args.batch, threads=args.threads, iters=args.iters,
                rounds=args.rounds, load_average_before=load_before,
                load_average_after=os.getloadavg())
    if args.json:
        print(json.dumps(dict(meta, rows=rows), indent=1))
        return
    print(meta['model'], f'| base batch {args.batch}, {args.threads} '
          f'thread(s), median of {args.rounds} x {args.iters} iterations')
    print(f'load average (1, 5, 15 min) before {load_before}, after '
          f'{meta["load_average_after"]}')
    print('    B   T    S  tokens/clip  s/iter  x base  clips/s  bounded by')
    for r in rows:
        print(f'{r["batch"]:5d} {r["clip_len"]:3d} {r["crop_size"]:4d} '
              f'{r["tokens_per_clip"]:12d} {r["seconds_per_iter"]:7.3f} '
              f'{r["ratio_to_base"]:7.2f} {r["clips_per_second"]:8.1f}  '
              f'{r["bounded_by"]}')


if __name__ == '__main__':
    main()
