"""Ablation arms of the multigrid demo, with seeds: where its accuracy goes.

Usage: python tools/benchmark/multigrid_demo_study.py --arms ARM [ARM ...]
[--seeds 0 1 2] [--out work_dirs/mg_demo_study/results.jsonl]
[--trajectory N] [--workers 1] [--threads 1]
python tools/benchmark/multigrid_demo_study.py --summary FILE [--markdown]
python tools/benchmark/multigrid_demo_study.py --list | --maps [--config C]

Each (arm, seed) trains in its own process, exactly as
``tools/train.py CONFIG --seed SEED --cfg-options ...`` would (same config,
same runner), with ``--workers`` loader workers and ``--threads`` torch
threads, and appends one JSON line to ``--out``: the final top-1 of the
run's own validation, every validation of the run, wall-clock seconds,
iterations, the shapes precise BN ran on, and diagnostics that leave the
run's training untouched (they run under saved and restored torch, numpy and
Python RNG states, on validation clips decoded once):

* ``trajectory``: top-1 after every ``--trajectory``-th epoch;
* ``bn_variants``: top-1 of the final weights with the BN statistics the run
  evaluates (``final``), with the train-time running statistics before the
  last precise-BN pass (``ema``), and with precise BN recomputed over 64
  batches of the base shape (``precise64``).

Arms (``--list``) are the shipped demo, its recipe (the same config without
the hook), ablations of the hook's options, larger base crops (the 64 px
demo frames upsampled, so the data is the same and only the feature-map
sizes change) and two patched variants of suspected defects (sub-BN splits
set per short-cycle batch; LR scaled with the short-cycle batch).
``--summary`` prints mean +- std per arm from a results file; ``--maps``
prints the backbone's final feature map per planned shape of a config.
"""
import argparse
import copy
import json
import os
import os.path as osp
import random
import subprocess
import sys
import time

import mmext  # noqa: F401
import numpy as np
import torch
from mmengine.hooks import Hook
from seed_stats import format_summary, summary, values_text

from mmext.multigrid import MultigridPlan
from mmext.multigrid.pipeline import parse_grid_shape, resize_pipeline
from mmext.multigrid.plan import is_multigrid_hook
from mmext.cli import build_runner, load_run_config

DEMO = 'configs/demo/recognizer3d_r18_multigrid_demo-video.py'
RECIPE8 = 'configs/demo/recognizer3d_r18_demo-video.py'
SQRT1_2 = 0.5**0.5
# The MultigridHook of the demo as shipped before this study (issue 20); the
# arms edit this, so they do not change when the demo config does.
SHIPPED_HOOK = dict(
    type='mmext.MultigridHook', long_cycle=True, short_cycle=True,
    epoch_factor=1.5, long_cycle_factors=[(0.5, SQRT1_2), (0.5, 1), (1, 1)],
    short_cycle_factors=[0.5, SQRT1_2], short_cycle_mode='absolute',
    bn_base_size=4, precise_bn_iters=4)


def _arm(config=DEMO, hook=None, crop=None, patches=(), options=None,
         recipe=False, text='', shipped=True):
    hook = dict(SHIPPED_HOOK, **(hook or {})) if shipped else hook
    return dict(config=config, hook=hook or {}, crop=crop,
                patches=list(patches), options=options or {}, recipe=recipe,
                text=text)


ARMS = {
    'recipe': _arm(recipe=True, text='demo multigrid config without the '
                   'hook: B=4, LR 0.025, 40 epochs (640 iterations)'),
    'recipe8': _arm(config=RECIPE8, recipe=True,
                    text='the base demo recipe: B=8, LR 0.05, 12 epochs'),
    'shipped': _arm(text='as shipped: long + short cycle, short factors '
                    '0.5/0.707, bn_base_size 4, precise BN 4'),
    'long_only': _arm(hook=dict(short_cycle=False), text='short_cycle=False'),
    'short_only': _arm(hook=dict(long_cycle=False), text='long_cycle=False'),
    'long_t16': _arm(hook=dict(long_cycle_factors=[(1, SQRT1_2), (1, 1)]),
                     text='long cycle at T=16 only: (1, 0.707), (1, 1); '
                     'short factors 0.5/0.707'),
    'short_75_875': _arm(hook=dict(short_cycle_factors=[0.75, 0.875]),
                         text='short factors 0.75/0.875 (crops 42, 49)'),
    'short_707_85': _arm(hook=dict(short_cycle_factors=[SQRT1_2, 0.85]),
                         text='short factors 0.707/0.85 (crops 40, 48)'),
    'short_707': _arm(hook=dict(short_cycle_factors=[SQRT1_2]),
                      text='one small crop, factor 0.707 (40)'),
    # Crops 32 and 33 px: the same batch factor (3) and almost the same
    # resolution, but final maps of 1x1 and 2x2 (total stride 32).
    'short_32': _arm(hook=dict(short_cycle_factors=[32 / 56, SQRT1_2]),
                     text='short crops 32/40 (final map 1x1 at 32)'),
    'short_33': _arm(hook=dict(short_cycle_factors=[33 / 56, SQRT1_2]),
                     text='short crops 33/40 (final map 2x2 at 33)'),
    'short_60': _arm(hook=dict(short_cycle_factors=[0.6, SQRT1_2]),
                     text='short factors 0.6/0.707 (crops 34, 40: 2x2)'),
    'short_60_precise16': _arm(
        hook=dict(short_cycle_factors=[0.6, SQRT1_2], precise_bn_iters=16),
        text='short factors 0.6/0.707, precise_bn_iters=16'),
    'proposed': _arm(shipped=False, text='the demo config as it is now '
                     '(configs/demo/recognizer3d_r18_multigrid_demo-video.py)'),
    'no_subbn': _arm(hook=dict(bn_base_size=None), text='bn_base_size=None'),
    'no_precise': _arm(hook=dict(precise_bn_iters=0),
                       text='precise_bn_iters=0'),
    'no_subbn_no_precise': _arm(hook=dict(bn_base_size=None,
                                          precise_bn_iters=0),
                                text='both off'),
    'precise16': _arm(hook=dict(precise_bn_iters=16),
                      text='precise_bn_iters=16 (every train clip)'),
    'short_lr': _arm(patches=['short_cycle_lr'],
                     text='patched: LR x (short-cycle batch / long-cycle '
                     'batch)'),
    'recipe_crop80': _arm(crop=80, recipe=True,
                          text='recipe at crop 80 (frames upsampled)'),
    'shipped_crop80': _arm(crop=80, text='as shipped at crop 80'),
    'recipe_crop112': _arm(crop=112, recipe=True,
                           text='recipe at crop 112 (frames upsampled)'),
    'shipped_crop112': _arm(crop=112, text='as shipped at crop 112'),
}


# ---------------------------------------------------------------- config
def _hook_cfg(cfg):
    return next(h for h in cfg.custom_hooks if is_multigrid_hook(h))


def _scale_crop(cfg, crop):
    """Train and val crops of ``crop`` px; sizes before them scale alike."""
    for loader in (cfg.train_dataloader, cfg.val_dataloader,
                   cfg.test_dataloader):
        pipeline = loader.dataset.pipeline
        try:
            t, _, _ = parse_grid_shape(pipeline)
        except ValueError:  # e.g. a ThreeCrop test pipeline
            continue
        loader.dataset.pipeline = resize_pipeline(pipeline, t, crop)


def build_arm_config(name, seed, work_dir, workers):
    """The arm's config, as ``tools/train.py`` would train it."""
    arm = ARMS[name]
    cfg = load_run_config(arm['config'], arm['options'] or None, work_dir)
    cfg.randomness = dict(cfg.get('randomness') or {}, seed=seed)
    cfg.train_dataloader.num_workers = workers
    cfg.val_dataloader.num_workers = workers
    # Checkpoints are not what is studied (writing them changes nothing).
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook',
                                        interval=10**6, save_last=False)
    if arm['crop']:
        _scale_crop(cfg, arm['crop'])
    if arm['recipe']:
        cfg.custom_hooks = [h for h in cfg.get('custom_hooks', [])
                            if not is_multigrid_hook(h)]
    elif arm['hook']:
        hook = _hook_cfg(cfg)
        hook.clear()
        hook.update(copy.deepcopy(arm['hook']))
    return cfg


# ---------------------------------------------------------------- diagnostics
class _RngState:
    """Save and restore every RNG the training reads (torch, numpy, random).
    """

    def __enter__(self):
        self.states = (torch.get_rng_state(), np.random.get_state(),
                       random.getstate())
        return self

    def __exit__(self, *exc):
        torch.set_rng_state(self.states[0])
        np.random.set_state(self.states[1])
        random.setstate(self.states[2])


def _bn_buffers(model):
    return {k: v.clone() for k, v in model.state_dict().items()
            if k.endswith(('running_mean', 'running_var',
                           'num_batches_tracked'))}


def _multigrid_hook(runner):
    hooks = [h for h in runner.hooks if type(h).__name__ == 'MultigridHook']
    return hooks[0] if hooks else None


class Diagnostics(Hook):
    """Top-1 over epochs and under BN-statistics variants, RNG-neutral.

    Runs last (``LOWEST``), after the multigrid hook's precise BN. The
    validation clips are decoded once (the val pipeline is deterministic)
    and evaluated in batches of 8 without the runner's loop, so no loader,
    sampler or hook of the run sees these evaluations.
    """

    priority = 'LOWEST'

    def __init__(self, every=0):
        self.every = every
        self.trajectory = []
        self.bn_variants = {}
        self._clips = None
        self._ema = None

    def _model(self, runner):
        return runner.model.module if hasattr(runner.model,
                                              'module') else runner.model

    def _evaluate(self, runner):
        from mmengine.dataset import pseudo_collate

        from mmext.multigrid.bn import aggregate_sub_bn_stats
        model = self._model(runner)
        with _RngState():
            if self._clips is None:
                dataset = runner.val_loop.dataloader.dataset
                self._clips = [dataset[i] for i in range(len(dataset))]
            aggregate_sub_bn_stats(model)
            was_training = model.training
            model.eval()
            correct = 0
            with torch.no_grad():
                for i in range(0, len(self._clips), 8):
                    batch = pseudo_collate(self._clips[i:i + 8])
                    for out in model.test_step(batch):
                        correct += int(out.pred_score.argmax() ==
                                       out.gt_label.item())
            model.train(was_training)
        return correct / len(self._clips)

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        if batch_idx + 1 == len(runner.train_loop.dataloader):
            # Train-time statistics at the end of every epoch (precise BN
            # overwrites them after the last one).
            self._ema = _bn_buffers(self._model(runner))

    def after_train_epoch(self, runner):
        last = runner.epoch + 1 == runner.max_epochs
        if last or (self.every and (runner.epoch + 1) % self.every == 0):
            self.trajectory.append((runner.epoch + 1,
                                    self._evaluate(runner)))
        if last:
            self._bn_variants(runner)

    def _bn_variants(self, runner):
        from mmext.multigrid.bn import update_precise_bn
        model = self._model(runner)
        final = _bn_buffers(model)
        self.bn_variants['final'] = self.trajectory[-1][1]
        if self._ema is not None:
            model.load_state_dict(self._ema, strict=False)
            self.bn_variants['ema'] = self._evaluate(runner)
        mg = _multigrid_hook(runner)
        if mg is not None:
            with _RngState():
                stage = mg.plan.stage_at(runner.epoch)
                loader = mg.build_loader(runner, stage, short_cycle=False)

                def batches(n=64):
                    while True:
                        for b in loader:
                            if not n:
                                return
                            n -= 1
                            yield b

                def forward(batch):
                    data = model.data_preprocessor(batch, True)
                    model(**data, mode='tensor')

                update_precise_bn(model, batches(), forward)
                del loader
            self.bn_variants['precise64'] = self._evaluate(runner)
        model.load_state_dict(final, strict=False)


class ShortCycleLR(Hook):
    """Patch: LR x (this iteration's batch / the long-cycle batch).

    Runs after ``MultigridHook.before_train_iter`` (which scales by the
    long-cycle batch factor and restores the recipe's LR after the step, so
    this extra factor is undone with it).
    """

    priority = 'NORMAL'

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        mg = _multigrid_hook(runner)
        stage = mg.plan.stage_at(runner.epoch)
        factor = len(data_batch['inputs']) / mg.plan.batch_sizes(
            stage, short_cycle=False)[0]
        # The demo trains one optimizer (no OptimWrapperDict).
        for group in runner.optim_wrapper.optimizer.param_groups:
            group['lr'] *= factor


PATCHES = dict(short_cycle_lr=ShortCycleLR)


def _record_precise_bn(records, runner_ref):
    """Wrap the hook's precise-BN call to record the batch shapes it uses."""
    import mmext.multigrid.hook as hook_module
    original = getattr(hook_module, 'update_precise_bn', None)
    if original is None:
        return

    def recording(model, batches, forward):
        shapes = []

        def tap():
            for batch in batches:
                c, t, h, w = batch['inputs'][0].shape[-4:]
                shapes.append((len(batch['inputs']), t, h))
                yield batch

        count = original(model, tap(), forward)
        records.append(dict(epoch=runner_ref[0].epoch + 1,
                            shapes=sorted(set(shapes)), batches=count))
        return count

    hook_module.update_precise_bn = recording


def run_one(name, seed, work_dir, workers, every):
    """Train one (arm, seed); return its JSON record."""
    cfg = build_arm_config(name, seed, work_dir, workers)
    runner = build_runner(cfg)
    diagnostics = Diagnostics(every)
    runner.register_hook(diagnostics)
    for patch in ARMS[name]['patches']:
        runner.register_hook(PATCHES[patch]())
    precise = []
    _record_precise_bn(precise, [runner])
    start = time.perf_counter()
    runner.train()
    seconds = time.perf_counter() - start
    vals = runner.message_hub.get_scalar('val/acc/top1')
    history = [float(v) for v in vals.data[0]]
    mg = _multigrid_hook(runner)
    return dict(arm=name, seed=seed, top1=history[-1], val_history=history,
                val_interval=cfg.train_cfg.get('val_interval'),
                seconds=seconds, iters=runner.iter, epochs=runner.epoch,
                trajectory=diagnostics.trajectory,
                bn_variants=diagnostics.bn_variants, precise_bn=precise,
                iteration_saving=mg.plan.iteration_saving() if mg else None,
                threads=torch.get_num_threads(), workers=workers,
                load_average=os.getloadavg())


# ---------------------------------------------------------------- maps
def final_maps(config, hook=None, crop=None):
    """Backbone output ``[T', H', W']`` per planned ``(T, S)`` of a config.

    A forward of one clip per shape through the backbone built on the
    ``meta`` device (shapes only: no weights, no memory, no compute). For a
    two-pathway backbone (SlowFast) the maps of both pathways are listed.
    """
    from mmaction.registry import MODELS
    from mmaction.utils import register_all_modules
    register_all_modules()
    cfg = load_run_config(config)
    if crop:
        _scale_crop(cfg, crop)
    if hook:
        hook_cfg = _hook_cfg(cfg)
        hook_cfg.clear()
        hook_cfg.update(hook)
    plan = MultigridPlan.from_config(cfg)
    with torch.device('meta'):
        backbone = MODELS.build(cfg.model).backbone
    backbone.eval()  # ResNet3d.train() returns None
    shapes = sorted({(x.clip_len, x.crop_size) for s in plan.stages
                     for x in s.short_cycle}, key=lambda k: (k[1], k[0]))
    out = []
    with torch.no_grad():
        for t, s in shapes:
            feats = backbone(torch.zeros(1, 3, t, s, s, device='meta'))
            if isinstance(feats, torch.Tensor):
                feats = [feats]
            out.append(dict(clip_len=t, crop_size=s,
                            final_map=[list(f.shape[-3:]) for f in feats]))
    return out


# ---------------------------------------------------------------- summary
def load_results(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _plateau(record, epochs=6):
    """Mean top-1 over the last ``epochs`` trajectory points (the end of the
    run, where the LR is smallest)."""
    points = [acc for _, acc in record['trajectory']][-epochs:]
    return sum(points) / len(points)


def arm_table(results):
    """Per arm: seeds, top-1 summary, paired difference to ``recipe``,
    plateau, BN variants and minutes per run."""
    arms = {}
    for r in results:
        arms.setdefault(r['arm'], {})[r['seed']] = r
    recipe = arms.get('recipe', {})
    rows = []
    for name, runs in arms.items():
        seeds = sorted(runs)
        row = dict(arm=name, seeds=seeds,
                   top1=summary([runs[s]['top1'] for s in seeds]),
                   plateau=summary([_plateau(runs[s]) for s in seeds]),
                   minutes=summary([runs[s]['seconds'] / 60
                                    for s in seeds]),
                   iters=runs[seeds[0]]['iters'], paired=None, bn={})
        common = {s: runs[s]['top1'] for s in seeds if s in recipe}
        if name != 'recipe' and common:
            row['paired'] = summary([common[s] - recipe[s]['top1']
                                     for s in common])
        for key in ('ema', 'precise64'):
            values = [runs[s]['bn_variants'][key] for s in seeds
                      if key in runs[s]['bn_variants']]
            if values and name not in ('recipe', 'recipe8'):
                row['bn'][key] = summary(values)
        rows.append(row)
    return rows, arms


def print_summary(results, markdown=False):
    rows, arms = arm_table(results)
    if markdown:
        print('| arm | n | top-1 mean +- std | per seed | vs recipe '
              '(paired) | last 6 epochs | BN: train-time (ema) | BN: '
              'precise 64 batches | iters | min/run |')
        print('|---|---|---|---|---|---|---|---|---|---|')
    for row in rows:
        runs = arms[row['arm']]
        per_seed = ' '.join(f'{runs[s]["top1"] * 24:.0f}'
                            for s in row['seeds'])
        cells = [row['arm'], str(row['top1']['n']),
                 format_summary(row['top1']).split(' (')[0],
                 per_seed + ' /24', format_summary(row['paired'])
                 .split(' (')[0], format_summary(row['plateau'])
                 .split(' (')[0]]
        cells += [format_summary(row['bn'].get(k)).split(' (')[0]
                  for k in ('ema', 'precise64')]
        cells += [str(row['iters']), f'{row["minutes"]["mean"]:.2f}']
        if markdown:
            print('| ' + ' | '.join(cells) + ' |')
        else:
            print('  '.join(cells))


# ---------------------------------------------------------------- main
def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument('--arms', nargs='+', choices=sorted(ARMS))
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--out',
                        default='work_dirs/mg_demo_study/results.jsonl')
    parser.add_argument('--work-dir', default='work_dirs/mg_demo_study')
    parser.add_argument('--trajectory', type=int, default=0, metavar='N',
                        help='top-1 after every N-th epoch (0: last only)')
    parser.add_argument('--workers', type=int, default=1,
                        help='train/val loader workers')
    parser.add_argument('--threads', type=int, default=1,
                        help='torch threads (and OMP_NUM_THREADS)')
    parser.add_argument('--summary', metavar='FILE')
    parser.add_argument('--markdown', action='store_true')
    parser.add_argument('--list', action='store_true')
    parser.add_argument('--maps', action='store_true')
    parser.add_argument('--config', default=DEMO)
    parser.add_argument('--crop', type=int)
    parser.add_argument('--run', nargs=2, metavar=('ARM', 'SEED'),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.list:
        for name, arm in ARMS.items():
            print(f'{name:>22}  {arm["text"]}')
        return
    if args.maps:
        for row in final_maps(args.config, crop=args.crop):
            print(row)
        return
    if args.summary:
        print_summary(load_results(args.summary), args.markdown)
        return
    if args.run:
        torch.set_num_threads(args.threads)
        name, seed = args.run[0], int(args.run[1])
        record = run_one(name, seed,
                         osp.join(args.work_dir, f'{name}_s{seed}'),
                         args.workers, args.trajectory)
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        with open(args.out, 'a') as f:
            f.write(json.dumps(record) + '\n')
        print(f'RESULT {name} seed {seed}: top-1 {record["top1"]:.4f} '
              f'{record["seconds"]:.0f} s bn {record["bn_variants"]}',
              flush=True)
        return
    if not args.arms:
        parser.error('give --arms (see --list), --summary, --maps or --list')
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads))
    for name in args.arms:
        for seed in args.seeds:
            cmd = [sys.executable, __file__, '--run', name, str(seed),
                   '--out', args.out, '--work-dir', args.work_dir,
                   '--trajectory', str(args.trajectory),
                   '--workers', str(args.workers),
                   '--threads', str(args.threads)]
            proc = subprocess.run(cmd, env=env, capture_output=True,
                                  text=True)
            lines = [ln for ln in proc.stdout.splitlines()
                     if ln.startswith('RESULT')]
            if proc.returncode or not lines:
                print(f'{name} seed {seed} failed ({proc.returncode}):\n'
                      f'{proc.stderr[-3000:]}', flush=True)
                continue
            print(lines[-1], flush=True)


if __name__ == '__main__':
    main()
