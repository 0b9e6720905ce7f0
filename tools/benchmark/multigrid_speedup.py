"""Train one recipe with and without multigrid; show where the time goes.

Usage: python tools/benchmark/multigrid_speedup.py [--config CONFIG]
[--epochs N] [--synthetic] [--project] [--device cpu|cuda] [--threads N]
[--channels-last] [--compile [BACKEND]] [--amp [DTYPE]] [--repeat-aug N]
[--repeats N] [--warmup N] [--project-iters N] [--project-seconds S]
[--loader-clips N] [--clips N] [--json] [--work-dir DIR] [--cfg-options key=value ...]

Trains the config (``--synthetic``: on random in-memory clips) without its
``MultigridHook`` (baseline) and with it; prints per run the time,
iterations, clips/s, data wait and compute, the bound and top-1, per grid
shape the compute time, then the speed-up against the schedule's iteration
saving and their ratio. ``--project`` trains nothing: it times every
planned grid shape and projects the full schedule; per shape it also loads
``--loader-clips`` clips of the config's data and gives the loader's ms
per clip (the costliest transform named) beside the compute's. Per shape the FLOP rate
(3x the counted forward FLOPs per step) beside the base shape's; on CUDA
cuDNN's autotuner is on; the dtype, TF32 and cuDNN settings are printed.
Options, output and measured figures: docs/en/benchmarks.md (Speed-up).
"""
import argparse
import copy
import ctypes
import gc
import itertools
import json
import os
import os.path as osp
import statistics
import sys
import time
from contextlib import contextmanager

from mmengine.config import DictAction
from mmengine.hooks import Hook

from bench_utils import (LoadSampler, RunRecorder, build_runner,
                         load_run_config)

from mmext.multigrid import MultigridHook, MultigridPlan
from mmext.multigrid.checks import check_clip_lengths
from mmext.multigrid.data import (MultigridDataset, parse_grid_shape,
                                  resize_pipeline)
from mmext.multigrid.hook import prepare_run
from mmext.multigrid.memory import glibc_version
from mmext.multigrid.plan import build_hook, is_multigrid_hook
from mmext.multigrid.report import describe

DEFAULT_CONFIG = 'configs/multigrid/recognizer3d_r18w64_multigrid_fight.py'
# --synthetic on CUDA: 16x the default's 240 clips (one H200 took 2-3 s per
# arm at 240, issue 39).
CUDA_CLIPS = 3840
# The data-wait share above which the hook calls a run data-bound.
DATA_WAIT_THRESHOLD = MultigridHook().watch.threshold


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc >= 2.33)."""
    _fields_ = [(name, ctypes.c_size_t) for name in (
        'arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks',
        'fsmblks', 'uordblks', 'fordblks', 'keepcost')]


def mmapped_bytes():
    """glibc's mmapped bytes now; None without glibc >= 2.33."""
    version = glibc_version()
    if version is None or tuple(map(int, version.split('.')[:2])) < (2, 33):
        return None
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _MallInfo2
    return mallinfo2().hblkhd


def keeps_freed_memory():
    """Whether glibc serves a 64 MiB block from its heap (keeps freed
    memory) rather than a fresh mmap; None without mallinfo2."""
    import torch
    before = mmapped_bytes()
    if before is None:
        return None
    block = torch.empty(16 * 2**20)  # 64 MiB
    kept = mmapped_bytes() == before
    del block
    return kept


def shorten_schedule(cfg, epochs):
    """Train ``epochs`` recipe epochs, the LR schedule scaled in proportion
    (milestones, warm-up), evaluating only at the end."""
    old = cfg.train_cfg.max_epochs
    cfg.train_cfg.max_epochs = epochs
    cfg.train_cfg.val_begin = 10**6  # not even after the last epoch
    for s in cfg.param_scheduler:
        if 'milestones' in s:
            s.milestones = sorted({int(m * epochs / old)
                                   for m in s.milestones} - {0})
        s.begin = s.get('begin', 0) * epochs / old
        s.end = min(s.end * epochs / old, epochs)
    # Checkpoint writing is not what is compared.
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook',
                                        interval=10**6, save_last=False)


def _make_synthetic(cfg, work_dir, clips=None):
    """Train/val on random clips of the same shapes: the recipe's list if
    readable and ``clips`` is None, else ``clips`` (default 240) clips."""
    ann = osp.join(work_dir, 'synthetic.txt')
    os.makedirs(work_dir, exist_ok=True)
    src = cfg.train_dataloader.dataset.get('ann_file', '')
    if clips is None and osp.isfile(src):
        with open(src) as f:
            lines = [ln for ln in f if ln.strip()]
    else:
        classes = cfg.model.cls_head.num_classes
        lines = [f'clip{i}.mp4 {i % classes}\n' for i in range(clips or 240)]
    with open(ann, 'w') as f:
        f.writelines(lines)
    pipeline = cfg.train_dataloader.dataset.pipeline
    clip_len, _, crop = parse_grid_shape(pipeline)
    sampler = next(t for t in pipeline
                   if t['type'] in ('SampleFrames', 'UniformSample'))
    fmt = next(t for t in pipeline if t['type'] == 'FormatShape')
    frames = clip_len * sampler.get('frame_interval', 1) * sampler.get(
        'num_clips', 1)
    synthetic = [
        dict(type='SyntheticVideoInit', total_frames=frames),
        dict(sampler),
        dict(type='SyntheticVideoDecode', size=(crop, crop)),
        dict(type='Resize', scale=(crop, crop), keep_ratio=False),
        dict(fmt),
        dict(type='PackActionInputs')
    ]
    for loader in (cfg.train_dataloader, cfg.val_dataloader):
        loader.dataset.ann_file = ann
        loader.dataset.pipeline = synthetic
        if loader.dataset.type == 'mmext.CachedVideoDataset':  # no videos
            loader.dataset.type = 'VideoDataset'
            for key in ('cache_dir', 'max_cache_gib'):
                loader.dataset.pop(key, None)
    # Registers the Synthetic* transforms (this tool's folder is on sys.path).
    cfg.custom_imports = dict(imports=['bench_utils'],
                              allow_failed_imports=False)
    val = [dict(t) for t in synthetic]
    val[1]['test_mode'] = True
    cfg.val_dataloader.dataset.pipeline = val


def _apply_stack(cfg, args, amp_wrapper=True):
    """The speed options (``--channels-last`` ...) on one run's config;
    ``amp_wrapper=False``: AMP's hooks only (``--project`` autocasts)."""
    hooks = list(cfg.get('custom_hooks', []))
    if args.channels_last:
        hooks.insert(0, dict(type='ChannelsLastHook'))
    if args.amp and amp_wrapper:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.dtype = args.amp
        if args.amp == 'float16':
            cfg.optim_wrapper.loss_scale = 'dynamic'
    if args.amp == 'bfloat16':
        # mmaction2's top-k accuracy is numpy, which has no bfloat16.
        hooks.insert(0, dict(type='Float32HeadHook'))
    cfg.custom_hooks = hooks
    if args.compile:
        cfg.compile = dict(backend=args.compile)
    if args.repeat_aug:
        loader = cfg.train_dataloader
        if loader.batch_size % args.repeat_aug:
            sys.exit(f'--repeat-aug {args.repeat_aug}: the config\'s '
                     f'train batch_size {loader.batch_size} is not a multiple '
                     f'of it (each video gives {args.repeat_aug} clips).')
        if loader.dataset.type == 'mmext.CachedVideoDataset':
            sys.exit('--repeat-aug: RepeatAugDataset decodes with decord, '
                     'not from the frame cache of mmext.CachedVideoDataset; '
                     'add --cfg-options train_dataloader.dataset.type='
                     'VideoDataset to compare on decord.')
        loader.batch_size //= args.repeat_aug
        loader.collate_fn = dict(type='repeat_pseudo_collate')
        loader.dataset.type = 'RepeatAugDataset'
        loader.dataset.num_repeats = args.repeat_aug


def _stack(args):
    """Which speed options were on (the JSON's ``stack``)."""
    return {k: getattr(args, k)
            for k in ('channels_last', 'compile', 'amp', 'repeat_aug')}


def _drop_multigrid(cfg):
    cfg.custom_hooks = [h for h in cfg.get('custom_hooks', [])
                        if not is_multigrid_hook(h)]


class _Baseline(Hook):
    """The hook's run set-up besides multigrid (``prepare_run``)."""

    def __init__(self, keep_cpu_memory):
        self.keep_cpu_memory = keep_cpu_memory

    def before_run(self, runner):
        prepare_run(runner, self.keep_cpu_memory)


def evaluate_at(runner, cfg, clip_lens, top1=None):
    """Top-1 on the val clips at each of ``clip_lens`` (the pipeline
    scaled as the hook scales it); None where the backbone refuses one.
    ``top1``, the run's evaluation at the val pipeline's own T, is reused
    there instead of evaluated again."""
    pipeline = cfg.val_dataloader.dataset.pipeline
    own_clip_len, _, crop_size = parse_grid_shape(pipeline)
    out = {}
    for clip_len in clip_lens:
        if clip_len == own_clip_len and top1 is not None:
            out[clip_len] = top1
            continue
        try:
            check_clip_lengths(runner.model.backbone, [clip_len])
        except ValueError:
            out[clip_len] = None
            continue
        loader = copy.deepcopy(cfg.val_dataloader)
        loader.dataset.pipeline = resize_pipeline(pipeline, clip_len,
                                                  crop_size)
        runner.val_loop.dataloader = runner.build_dataloader(loader)
        out[clip_len] = runner.val_loop.run()['acc/top1']
    return out


def train_arm(args, multigrid, clip_lens=(), hook_options=None):
    """Train one run (multigrid with ``hook_options`` overriding the
    config's ``MultigridHook`` options, if given): its
    figures (with ``top1_at`` ``clip_lens``), config, clips per process and
    the hook's plan."""
    name = 'multigrid' if multigrid else 'baseline'
    work_dir = osp.join(args.work_dir, name)
    cfg = load_run_config(args.config, args.cfg_options, work_dir)
    shorten_schedule(cfg, args.epochs)
    if args.synthetic:
        _make_synthetic(cfg, work_dir, getattr(args, 'clips', None))
    keep_cpu_memory = build_hook(cfg).keep_cpu_memory
    if not multigrid:
        _drop_multigrid(cfg)
    elif hook_options:
        next(h for h in cfg.custom_hooks
             if is_multigrid_hook(h)).update(hook_options)
    _apply_stack(cfg, args)
    runner = build_runner(cfg)
    if not multigrid:
        runner.register_hook(_Baseline(keep_cpu_memory))
    recorder = RunRecorder()
    runner.register_hook(recorder)
    with _compile_count(args) as compiled, LoadSampler() as load:
        start = time.perf_counter()
        runner.train()
        seconds = time.perf_counter() - start
    top1 = None if args.synthetic else runner.val_loop.run()['acc/top1']
    top1_at = evaluate_at(runner, cfg, clip_lens, top1)
    samples = len(runner.train_dataloader.sampler)
    # The hook's plan holds the FLOPs it counted on the model.
    plan = next((h.plan for h in runner.hooks
                 if isinstance(h, MultigridHook)), None)
    # Stop this run's persistent loader workers now, outside the timing: left
    # to the garbage collector, their shutdown (up to 5 s per loader) landed
    # inside the next run's set-up (measured: 21 s instead of 2 s).
    del runner
    gc.collect()
    result = _summarise(recorder, seconds, top1, load,
                        getattr(args, 'warmup', 1))  # the accuracy tool's: 1
    result['top1_at'] = top1_at
    result['kept_freed_memory'] = keeps_freed_memory()
    if compiled is not None:
        result['compile'] = compiled
    return result, cfg, samples, plan


@contextmanager
def _compile_count(args):
    """With ``--compile``: reset dynamo, yield the dict that gets the run's
    ``graphs``, ``fallbacks`` and ``fell_back``; otherwise yield None."""
    if not args.compile:
        yield None
        return
    import torch
    from mmext.compat import DynamoRecompileLimitWatch, dynamo_graph_count
    torch.compiler.reset()
    out = {}
    start = dynamo_graph_count()
    with DynamoRecompileLimitWatch() as watch:
        yield out
    out.update(graphs=dynamo_graph_count() - start,
               fallbacks=watch.fallbacks, fell_back=bool(watch.fallbacks))


def _summarise(recorder, seconds, top1, load, warmup=1):
    """Totals, data/compute split, bound, load and per-shape table (steady:
    the median after ``warmup`` iterations of the shape)."""
    rows = recorder.iters
    data = sum(r.data_seconds for r in rows)
    total = sum(r.seconds for r in rows)  # waits included
    clips = sum(r.batch_size for r in rows)
    share = min(max(data / total, 0.0), 1.0) if total > 0 else 0.0
    shapes, first_waits = {}, {}
    for r in rows:
        t, _, s = r.input_shape[-3:]
        shapes.setdefault((r.batch_size, t, s), []).append(
            (r.data_seconds, r.seconds, r.end))
        first_waits.setdefault(r.epoch, r.data_seconds)
    per_shape = []
    for (b, t, s), times in shapes.items():
        computes = [tt - d for d, tt, _ in times]
        compute = sum(computes) / len(computes)
        # The first iteration of a shape pays its one-time costs (oneDNN
        # primitive creation; with --compile the graph's compilation).
        steady = statistics.median(computes[warmup:] or computes)
        per_shape.append(dict(
            batch=b, clip_len=t, crop_size=s, iters=len(times),
            compute_s_per_iter=compute, compute_ms_per_clip=1000 * compute / b,
            first_iter_s=computes[0], steady_s_per_iter=steady,
            data_s_per_iter=sum(d for d, _, _ in times) / len(times),
            **load.during([end for _, _, end in times])))
    return dict(
        first_iter_excess_seconds=sum(
            max(0.0, x['first_iter_s'] - x['steady_s_per_iter'])
            for x in per_shape),
        seconds=seconds, iters=len(rows), clips=clips,
        clips_per_s=clips / seconds, data_seconds=data,
        compute_seconds=total - data, other_seconds=seconds - total,
        data_share=share, cpu_seconds=load.cpu_seconds,
        bound='data' if share > DATA_WAIT_THRESHOLD else 'compute', top1=top1,
        loader_rebuild_seconds=sum(g for _, g in recorder.epoch_gaps),
        epoch_end_seconds=sum(g for _, g in recorder.epoch_tails),
        first_batch_seconds=first_waits, shapes=per_shape,
        load=load.during([r.end for r in rows]))


def _print_runs(base, mg):
    print(f'{"":>10} {"time (s)":>9} {"iters":>6} {"clips/s":>8} '
          f'{"data (s)":>9} {"compute (s)":>11} {"other (s)":>9} '
          f'{"s/iter":>7} {"top-1":>6}  bound by')
    runs = (('baseline', base), ('multigrid', mg))
    for name, r in runs:
        top1 = '-' if r['top1'] is None else f'{r["top1"]:.3f}'
        print(f'{name:>10} {r["seconds"]:>9.1f} {r["iters"]:>6} '
              f'{r["clips_per_s"]:>8.2f} {r["data_seconds"]:>9.1f} '
              f'{r["compute_seconds"]:>11.1f} {r["other_seconds"]:>9.1f} '
              f'{r["seconds"] / r["iters"]:>7.3f} {top1:>6}  '
              f'{r["bound"]} (data wait {r["data_share"]:.0%} of '
              f'iteration time; threshold {DATA_WAIT_THRESHOLD:.0%})')
    print('other = outside iterations: set-up, loader rebuilds '
          f'({mg["loader_rebuild_seconds"]:.1f} s multigrid), precise BN and '
          f'epoch ends ({mg["epoch_end_seconds"]:.1f} s multigrid, '
          f'{base["epoch_end_seconds"]:.1f} s baseline)')
    base_iter = base['compute_seconds'] / base['iters']
    print(f'{"run":>10} {"batch":>6} {"T":>4} {"S":>4} {"iters":>6} '
          f'{"compute s/iter":>15} {"x baseline":>11} {"ms/clip":>8} '
          f'{"data s/iter":>12} {"TFLOP/s":>8} {"x base rate":>11}')
    for name, r in runs:
        for s in r['shapes']:
            print(f'{name:>10} {s["batch"]:>6} {s["clip_len"]:>4} '
                  f'{s["crop_size"]:>4} {s["iters"]:>6} '
                  f'{s["compute_s_per_iter"]:>15.3f} '
                  f'{s["compute_s_per_iter"] / base_iter:>11.2f} '
                  f'{s["compute_ms_per_clip"]:>8.1f} '
                  f'{s["data_s_per_iter"]:>12.3f} '
                  f'{_rate_text(s["tflops_per_s"]):>8} '
                  f'{_rate_text(s["rate_vs_base"]):>11}')
    for name, r in runs:
        c = r.get('compile')
        if c:
            print(f'{name}: torch.compile: {c["graphs"]} graphs; '
                  + ('frames that fell back to eager: '
                     + '; '.join(c['fallbacks']) if c['fell_back']
                     else 'no frame fell back to eager'))
    first = {e: round(float(w), 2)
             for e, w in mg['first_batch_seconds'].items()}
    print(f'multigrid first-batch wait per epoch (s): {first}')


# Other cores or load averages of the two arms further apart than this make
# their ratio a figure of the machine, not of multigrid.
LOAD_GAP = dict(other_cores=0.25, load_average=1.0)


def load_warning(base, mg):
    """The warning when the arms ran under clearly different load."""
    gaps = [f'{key.replace("_", " ")} {base["load"][key]:.2f} vs '
            f'{mg["load"][key]:.2f}' for key, limit in LOAD_GAP.items()
            if abs(base['load'][key] - mg['load'][key]) > limit]
    if not gaps:
        return None
    return (f'warning: the arms ran under different load (baseline vs '
            f'multigrid: {"; ".join(gaps)}): their ratio is not a figure of '
            f'multigrid; rerun on an idle machine or with --repeats.')


def _overall(base, mg, plan):
    """Speed-up against the plan's iteration and FLOP savings."""
    saving = plan.iteration_saving()
    flop_saving = 1 / plan.flops_ratio()
    speedup = base['seconds'] / mg['seconds']
    # Net of each shape's first-iteration excess: the one-time costs that a
    # run of a few epochs pays per grid shape and a full schedule amortises.
    net = ((base['seconds'] - base['first_iter_excess_seconds'])
           / (mg['seconds'] - mg['first_iter_excess_seconds']))
    return dict(speedup=speedup, iteration_saving=saving,
                ratio=speedup / saving, speedup_net_of_first_iters=net,
                ratio_net_of_first_iters=net / saving,
                flop_saving=flop_saving, flops_counted=plan.flops_counted,
                flop_limit_share=speedup / flop_saving,
                load_warning=load_warning(base, mg))


# ---------------------------------------------------------------- projection
def _base_key(plan):
    """The base shape's key: ``(batch, T, S, 1)``."""
    return plan.base_batch, plan.base_clip_len, plan.base_crop_size, 1


def _shape_keys(plan):
    """``((batch, T, S, sub-BN splits), iters)`` per shape, in order."""
    return [((x.batch_size, x.shape.clip_len, x.shape.crop_size,
              x.sub_bn_splits), x.iters) for x in plan.shape_iterations()]


def _timing_cfg(cfg, batch_size, crop_size):
    """Copy of ``cfg`` with a smaller base batch and/or crop to time."""
    small = cfg.copy()
    dl = small.train_dataloader
    hook = next(h for h in small.custom_hooks if is_multigrid_hook(h))
    if batch_size:
        if hook.get('bn_base_size'):
            # Keep the number of sub-BN splits of every shape.
            hook['bn_base_size'] = max(
                1, hook['bn_base_size'] * batch_size // dl.batch_size)
        dl.batch_size = batch_size
    if crop_size:
        t, _, _ = parse_grid_shape(dl.dataset.pipeline)
        dl.dataset.pipeline = resize_pipeline(dl.dataset.pipeline, t,
                                              crop_size)
    return small


class _ShapeTimer(Hook):
    """Times train steps of every planned shape after the hook prepared
    the run, then ends it: ``times`` (shape key: median round-robin step,
    one no-grad forward), ``timed`` (steps, seconds), ``alone`` (base
    shape after itself), ``plan``.
    Each shape gets ``warmup`` untimed steps, then timed ones until it has
    ``iters`` of them and ``seconds`` in all; under ``amp`` autocast."""

    priority = 'LOWEST'

    def __init__(self, device, iters, warmup=1, seconds=0.0, amp=None):
        self.device, self.iters, self.warmup = device, iters, warmup
        self.seconds, self.amp = seconds, amp

    def before_train(self, runner):
        import torch
        from mmaction.structures import ActionDataSample
        self.plan = next(h for h in runner.hooks
                         if isinstance(h, MultigridHook)).plan
        base = _base_key(self.plan)
        shapes = list(dict.fromkeys(
            [base] + [k for k, _ in _shape_keys(self.plan)]))
        model, wrapper = runner.model, runner.optim_wrapper
        model.train()
        classes = runner.cfg.model.cls_head.num_classes
        cast = torch.autocast(self.device.split(':')[0], enabled=bool(
            self.amp), dtype=getattr(torch, self.amp or 'bfloat16'))

        def batch(b, t, s):
            inputs = [torch.randint(0, 256, (1, 3, t, s, s),
                                    dtype=torch.uint8) for _ in range(b)]
            samples = [ActionDataSample().set_gt_label(i % classes)
                       for i in range(b)]
            return dict(inputs=inputs, data_samples=samples)

        def timed(fn):
            if self.device.startswith('cuda'):
                torch.cuda.synchronize()
            start = time.perf_counter()
            with cast:
                fn()
            if self.device.startswith('cuda'):
                torch.cuda.synchronize()
            return time.perf_counter() - start

        def forward(data):
            with torch.no_grad():
                model(**model.data_preprocessor(data, True), mode='tensor')

        data = {key: batch(*key[:3]) for key in shapes}
        # Round-robin (load changes hit every shape alike) over the shapes
        # still short of steps or time, after ``warmup`` rounds; each round
        # ends with two base steps, the second timing the base shape after
        # itself, as the baseline trains it.
        steps = {key: [] for key in shapes}
        alone, forwards = [], {}
        for round_ in itertools.count(-self.warmup):
            todo = [k for k in shapes if len(steps[k]) < self.iters
                    or sum(steps[k]) < self.seconds]
            if not todo:
                break
            for key in todo:
                seconds = timed(lambda: model.train_step(data[key], wrapper))
                if round_ >= 0:
                    steps[key].append(seconds)
                if key not in forwards:
                    forwards[key] = timed(lambda: forward(data[key]))
            if base in todo:
                repeated = [timed(lambda: model.train_step(data[base],
                                                           wrapper))
                            for _ in range(2)]
                if round_ >= 0:
                    alone.append(repeated[1])
        self.times = {key: (statistics.median(steps[key]), forwards[key])
                      for key in shapes}
        self.timed = {key: (len(v), sum(v)) for key, v in steps.items()}
        for (b, t, s, splits), (step, _) in self.times.items():
            print(f'  timed batch {b:>3} T={t:>3} S={s:>3} sub-BN splits '
                  f'{splits}: {step:.3f} s/iter (median of '
                  f'{len(steps[(b, t, s, splits)])})')
        self.alone = statistics.median(alone)
        print(f'  timed the base shape after itself: {self.alone:.3f} '
              f's/iter (median of {len(alone)})')
        runner.train_loop.stop_training = True


def flop_rate(clip_flops, key, seconds):
    """TFLOP/s of a training step of ``key`` (batch, T, S, ...) taking
    ``seconds``: 3x its clips' forward FLOPs (the backward ~2x); None
    where the hook did not count them."""
    flops = (clip_flops or {}).get(tuple(key[1:3]))
    return None if flops is None else 3 * key[0] * flops / seconds / 1e12


def _rate_text(rate):
    return '-' if rate is None else f'{rate:.3g}'


def loader_costs_per_shape(cfg, shapes, clips):
    """Per grid shape ``(T, S)``: ms per clip in each transform of the
    config's train pipeline at that shape, on ``clips`` of its clips in
    this process (one loader worker's cost), by
    ``MultigridDataset.loader_costs``. A CachedVideoDataset is filled
    first (its fill is not timed). None where the data is not here."""
    from mmengine.registry import DATASETS, DefaultScope
    ds_cfg = cfg.train_dataloader.dataset
    if not osp.isfile(ds_cfg.get('ann_file', '')):
        return None
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        dataset = DATASETS.build(copy.deepcopy(ds_cfg))
        indices = range(min(clips, len(dataset)))
        if hasattr(dataset, 'frame_cache'):  # once, for every shape
            dataset.frame_cache.fill(
                [dataset.get_data_info(i)['filename'] for i in indices])
        out = {}
        for t, s in shapes:
            loader = MultigridDataset(dataset, [resize_pipeline(
                ds_cfg.pipeline, t, s)])
            for i in indices:
                loader[i]
            out[(t, s)] = loader.loader_costs()
    return out


def _print_loader(rows, costs, clips):
    """The loader's cost per clip beside the compute's, per shape."""
    print(f'loader ({clips} clips per shape, one process) and compute per '
          f'clip, ms:')
    for r in rows.values():
        b, t, s = r['full_shape']
        shape_costs = costs[(t, s)]
        most = max(shape_costs, key=shape_costs.get)
        r.update(loader_ms_per_clip=sum(shape_costs.values()),
                 loader_transforms_ms=shape_costs,
                 compute_ms_per_clip=1e3 * r['s_per_iter'] / r[
                     'timed_shape'][0])
        print(f'  (batch, T, S) {str(r["full_shape"]):>16}: loader '
              f'{r["loader_ms_per_clip"]:6.1f} ({most} '
              f'{shape_costs[most]:.1f}), compute '
              f'{r["compute_ms_per_clip"]:6.1f}: needs '
              f'{r["loader_ms_per_clip"] / r["compute_ms_per_clip"]:.1f} '
              f'loader workers')


def _project(args):
    """Projected full-schedule time of both recipes from timed shapes."""
    cfg = load_run_config(args.config, args.cfg_options,
                          osp.join(args.work_dir, 'project'))
    samples = args.samples_per_rank
    if samples is None:
        ann = cfg.train_dataloader.dataset.get('ann_file', '')
        if not osp.isfile(ann):
            sys.exit(f'--project needs the clips per process and epoch: the '
                     f'train ann_file {ann!r} is not readable here; give '
                     f'--samples-per-rank (e.g. 30055: Kinetics-400 over 8 '
                     f'GPUs).')
        with open(ann) as f:
            samples = sum(1 for ln in f if ln.strip())
    plan = MultigridPlan.from_config(cfg, samples_per_rank=samples)
    print(describe(plan))
    real = copy.deepcopy(cfg)  # the timing config's data is made up
    small = _timing_cfg(cfg, args.batch_size, args.crop_size)
    _make_synthetic(small, small.work_dir, clips=samples)
    _apply_stack(small, args, amp_wrapper=False)
    runner = build_runner(small)
    timer = _ShapeTimer(args.device, args.project_iters, args.warmup,
                        args.project_seconds, args.amp)
    runner.register_hook(timer)
    runner.train()
    small_plan, times, alone = timer.plan, timer.times, timer.alone
    small_keys = [k for k, _ in _shape_keys(small_plan)]
    base_key, small_base = _base_key(plan), _base_key(small_plan)
    if small_base[:3] != base_key[:3]:
        print(f'timed reduced shapes: base (batch, T, S) {small_base[:3]} '
              f'instead of {base_key[:3]}; every shape is scaled alike')
    round_robin = times[small_base][0]
    base_rate = flop_rate(small_plan.clip_flops, small_base, round_robin)
    rows = {}
    for (key, count), small_key in zip(_shape_keys(plan), small_keys):
        rate = flop_rate(small_plan.clip_flops, small_key,
                         times[small_key][0])
        row = rows.setdefault(small_key, dict(
            full_shape=key[:3], timed_shape=small_key[:3],
            sub_bn_splits=small_key[3], iters=0,
            s_per_iter=times[small_key][0],
            forward_s_per_iter=times[small_key][1], tflops_per_s=rate,
            timed_steps=timer.timed[small_key][0],
            timed_seconds=timer.timed[small_key][1],
            rate_vs_base=rate and base_rate and rate / base_rate))
        row['iters'] += count
    precise = build_hook(cfg).precise_bn_iters
    # Precise BN may run at each end of a long-cycle shape, on that shape
    # (the last of its stage's cycle).
    small_of = {(x.stage.start_epoch, x.shape): key for x, key in zip(
        small_plan.shape_iterations(), small_keys)}
    bn_shapes = [small_of[(stage.start_epoch, stage.short_cycle[-1])]
                 for stage in small_plan.stages
                 if precise and small_plan.is_shape_end(stage.end_epoch - 1)]
    bn_seconds = sum(precise * times[key][1] for key in bn_shapes)
    mg_seconds = sum(r['iters'] * r['s_per_iter']
                     for r in rows.values()) + bn_seconds
    base_iters = plan.recipe_epochs * plan.recipe_iters_per_epoch
    # The baseline recipe never changes shape: its base shape timed alone.
    base_seconds = base_iters * alone
    print(f'{"timed (batch, T, S)":>22} {"sub-BN":>6} {"full-size":>16} '
          f'{"iters":>8} {"s/iter":>7} {"x base":>7} {"minutes":>9} '
          f'{"TFLOP/s":>8} {"x base rate":>11}')
    for r in rows.values():
        print(f'{str(r["timed_shape"]):>22} {r["sub_bn_splits"]:>6} '
              f'{str(r["full_shape"]):>16} '
              f'{r["iters"]:>8} {r["s_per_iter"]:>7.3f} '
              f'{r["s_per_iter"] / round_robin:>7.2f} '
              f'{r["iters"] * r["s_per_iter"] / 60:>9.1f} '
              f'{_rate_text(r["tflops_per_s"]):>8} '
              f'{_rate_text(r["rate_vs_base"]):>11}')
    print(f'base shape {small_base[:3]}: {_rate_text(base_rate)} TFLOP/s '
          f'(3x the forward FLOPs the hook counted, per step)')
    costs = args.loader_clips and loader_costs_per_shape(
        real, {r['full_shape'][1:] for r in rows.values()}, args.loader_clips)
    if costs:
        _print_loader(rows, costs, args.loader_clips)
    result = dict(
        mode='project', device=args.device, samples_per_rank=samples,
        timed_base_shape=small_base[:3], base_shape=base_key[:3],
        shapes=list(rows.values()), base_tflops_per_s=base_rate,
        baseline=dict(iters=base_iters, seconds=base_seconds,
                      s_per_iter=alone, round_robin_s_per_iter=round_robin),
        shape_switching=round_robin / alone,
        multigrid=dict(iters=plan.max_iters, seconds=mg_seconds,
                       precise_bn_seconds=bn_seconds,
                       precise_bn_passes=[k[:3] for k in bn_shapes],
                       precise_bn_iters=precise))
    result.update(speedup=base_seconds / mg_seconds,
                  iteration_saving=plan.iteration_saving())
    result['ratio'] = result['speedup'] / result['iteration_saving']
    print(f'x base: against the base shape in the round-robin; after '
          f'itself (as the baseline trains) it took {alone:.3f} s/iter, so '
          f'changing shape every iteration costs '
          f'x{result["shape_switching"]:.2f}')
    print(f'projected: baseline {base_iters} iters, '
          f'{base_seconds / 60:.1f} min; multigrid {plan.max_iters} iters, '
          f'{mg_seconds / 60:.1f} min (precise BN {bn_seconds / 60:.1f} '
          f'min) -> speed-up {result["speedup"]:.2f}x; iteration saving '
          f'{result["iteration_saving"]:.2f}x; ratio {result["ratio"]:.2f} '
          f'(loader, evaluation and stage changes not included)')
    return result


def add_run_options(parser, work_dir):
    """Options of a recipe-vs-multigrid comparison (also the accuracy
    tool's)."""
    parser.add_argument('--config', default=DEFAULT_CONFIG)
    parser.add_argument('--epochs', type=int, default=4,
                        help='recipe epochs (multigrid trains x1.5)')
    parser.add_argument('--device', choices=['cpu', 'cuda'], default=None,
                        help='default: cuda if available, else cpu')
    parser.add_argument('--threads', type=int,
                        help='torch threads (default: torch\'s)')
    parser.add_argument('--channels-last', action='store_true',
                        help='both runs in channels_last_3d')
    parser.add_argument('--compile', nargs='?', const='inductor',
                        metavar='BACKEND', help='both runs compiled')
    parser.add_argument('--amp', nargs='?', const='float16',
                        choices=['float16', 'bfloat16'],
                        help='both runs with AmpOptimWrapper; needs CUDA')
    parser.add_argument('--repeat-aug', type=int, metavar='N',
                        help='both runs on RepeatAugDataset (real clips)')
    parser.add_argument('--json', action='store_true',
                        help='also print one JSON object (last line)')
    parser.add_argument('--work-dir', default=work_dir)
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='overrides applied to both runs')


def check_run_options(parser, args, positive):
    """``parser.error`` for bad options, before any model is built."""
    for option in (*positive, 'repeat_aug'):
        value = getattr(args, option)
        if value is not None and value < 1:
            parser.error(f'--{option.replace("_", "-")} must be >= 1, got '
                         f'{value}')
    stack = [f'--{k.replace("_", "-")}' for k, v in _stack(args).items()
             if v]
    stack = [s for s in stack if s in ('--compile', '--repeat-aug')]
    if getattr(args, 'project', False) and stack:
        parser.error(f'{" ".join(stack)}: for the training runs only; '
                     f'--project times the shapes eagerly on random clips')
    if args.repeat_aug and getattr(args, 'synthetic', False):
        parser.error('--repeat-aug needs the real clips: RepeatAugDataset '
                     'decodes with decord (DecordInit/DecordDecode), which '
                     '--synthetic replaces')
    cfg = load_run_config(args.config, args.cfg_options)
    if not any(map(is_multigrid_hook, cfg.get('custom_hooks', []))):
        parser.error(f'{args.config} has no MultigridHook in custom_hooks: '
                     f'nothing to compare against its baseline')


def setup_torch(parser, args):
    """Pick the device and torch threads; return torch."""
    if args.device == 'cpu':
        # mmengine's runner trains on CUDA whenever it is visible.
        os.environ['CUDA_VISIBLE_DEVICES'] = ''
    import torch
    if args.device is None:
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.device == 'cuda' and not torch.cuda.is_available():
        sys.exit('--device cuda: no CUDA device is available.')
    if args.amp and args.device != 'cuda' and not getattr(args, 'project',
                                                          False):
        parser.error("--amp: mmengine's AmpOptimWrapper refuses to build "
                     "without an accelerator (CUDA here); use --device "
                     "cuda (--project autocasts on the CPU too)")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f'load average (1, 5, 15 min): {os.getloadavg()}; torch threads '
          f'{torch.get_num_threads()}', flush=True)
    return torch


def _pair(args):
    """One baseline run, then one multigrid run, and their figures."""
    base, _, _, _ = train_arm(args, False)
    mg, _, _, plan = train_arm(args, True)
    for x in base['shapes'] + mg['shapes']:  # steady steps' FLOP rates
        x['tflops_per_s'] = rate = flop_rate(plan.clip_flops, (
            x['batch'], x['clip_len'], x['crop_size']), x['steady_s_per_iter'])
        first = base['shapes'][0]['tflops_per_s']
        x['rate_vs_base'] = rate and first and rate / first
    pair = dict(baseline=base, multigrid=mg, **_overall(base, mg, plan))
    if mg['iters'] != plan.max_iters:
        print(f'warning: multigrid trained {mg["iters"]} iterations, the '
              f'plan says {plan.max_iters}')
    if pair['load_warning']:
        print(pair['load_warning'])
    return pair


def _compare(args):
    """``--repeats`` alternated pairs; the median one printed in full."""
    pairs = [_pair(args) for _ in range(args.repeats)]
    ratios = [p['ratio'] for p in pairs]
    median = sorted(pairs, key=lambda p: p['ratio'])[(len(pairs) - 1) // 2]
    base, mg = median['baseline'], median['multigrid']
    _print_runs(base, mg)
    gap = ('' if base['top1'] is None else
           f'; top-1 gap {100 * (mg["top1"] - base["top1"]):+.1f} points')
    kind = ('counted on the model' if median['flops_counted'] else
            'B*T*S^2 estimate')
    print(f'first iteration of each shape above its median: '
          f'{base["first_iter_excess_seconds"]:.1f} s baseline, '
          f'{mg["first_iter_excess_seconds"]:.1f} s multigrid; net of '
          f'them: speed-up {median["speedup_net_of_first_iters"]:.2f}x, '
          f'ratio {median["ratio_net_of_first_iters"]:.2f}')
    print(f'speed-up {median["speedup"]:.2f}x; iteration saving '
          f'{median["iteration_saving"]:.2f}x; ratio {median["ratio"]:.2f} '
          f'(target >= 0.85 synthetic, 0.8 real clips){gap}')
    print(f'FLOP saving {median["flop_saving"]:.2f}x ({kind}): speed-up / '
          f'FLOP saving {median["flop_limit_share"]:.2f}')
    for name, run in (('baseline', base), ('multigrid', mg)):
        print(f'{name} ran beside {run["load"]["other_cores"]:.2f} other '
              f'busy cores, load average {run["load"]["load_average"]:.2f}')
    if len(pairs) > 1:
        print(f'{len(pairs)} alternated pairs: ratios '
              f'{[round(r, 2) for r in ratios]}, median '
              f'{statistics.median(ratios):.2f} (spread {min(ratios):.2f}-'
              f'{max(ratios):.2f})')
    return dict(mode='synthetic' if args.synthetic else 'real',
                device=args.device, stack=_stack(args), **median,
                median_ratio=statistics.median(ratios),
                ratio_spread=[min(ratios), max(ratios)],
                repeats=[{k: v for k, v in p.items()
                          if k not in ('baseline', 'multigrid')}
                         | dict(load=dict(baseline=p['baseline']['load'],
                                          multigrid=p['multigrid']['load']))
                         for p in pairs])


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_run_options(parser, 'work_dirs/mg_speedup')
    parser.add_argument('--synthetic', action='store_true',
                        help='random in-memory clips instead of decoding')
    parser.add_argument('--project', action='store_true',
                        help='time every grid shape, project the schedule')
    parser.add_argument('--warmup', type=int, default=2,
                        help='untimed steps per grid shape (training runs: '
                        'left out of its steady time)')
    parser.add_argument('--project-iters', type=int, default=10,
                        help='--project: timed steps per grid shape, at '
                        'least')
    parser.add_argument('--project-seconds', type=float, default=2.0,
                        help='--project: timed seconds per shape, at least')
    parser.add_argument('--clips', type=int,
                        help=f'--synthetic: clips per epoch (default: the '
                        f'train list\'s, on CUDA {CUDA_CLIPS}: 30 s or more '
                        f'per arm)')
    parser.add_argument('--loader-clips', type=int, default=30,
                        help='--project: clips loaded per shape to time the '
                        'loader (0: none)')
    parser.add_argument('--samples-per-rank', type=int,
                        help='--project: clips per process per epoch')
    parser.add_argument('--batch-size', type=int,
                        help='--project: time this base batch instead')
    parser.add_argument('--crop-size', type=int,
                        help='--project: time this base crop size instead')
    parser.add_argument('--repeats', type=int, default=1,
                        help='alternated pairs: median ratio and spread')
    args = parser.parse_args()
    check_run_options(parser, args, (
        'epochs', 'project_iters', 'samples_per_rank', 'batch_size',
        'crop_size', 'threads', 'repeats', 'clips'))
    if min(args.warmup, args.project_seconds, args.loader_clips) < 0:
        parser.error(f'--warmup {args.warmup}, --project-seconds '
                     f'{args.project_seconds}, --loader-clips '
                     f'{args.loader_clips}: must be >= 0')
    torch = setup_torch(parser, args)
    if args.device == 'cuda':  # a few fixed shapes: autotune each once
        args.cfg_options = {'env_cfg.cudnn_benchmark': True,
                            **(args.cfg_options or {})}
        if args.synthetic and args.clips is None:
            args.clips = CUDA_CLIPS
    result = _project(args) if args.project else _compare(args)
    result.update(load_average=os.getloadavg(),
                  threads=torch.get_num_threads(), settings=dict(
                      dtype=args.amp or 'float32',
                      channels_last=args.channels_last,
                      tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                      tf32_cudnn=torch.backends.cudnn.allow_tf32,
                      cudnn_benchmark=torch.backends.cudnn.benchmark,
                      cudnn=torch.backends.cudnn.version()))
    print('settings: ' + ', '.join(
        f'{k} {v}' for k, v in result['settings'].items()))
    print(f'load average (1, 5, 15 min): {result["load_average"]}')
    if args.json:
        print(json.dumps(result, default=str))


if __name__ == '__main__':
    main()
