"""Values and helpers shared by the multigrid test modules."""
import json
import os.path as osp

import torch
from helpers import REPO_ROOT
from mmengine.dist import get_rank
from mmengine.hooks import Hook
from mmengine.registry import HOOKS
from torch import nn

ROOT = REPO_ROOT

# LR stages and epochs of PySlowFast's Kinetics-400 SlowFast 8x8 R50
# stepwise recipe (SOLVER.STEPS, SOLVER.MAX_EPOCH), whose multigrid
# schedule is the reference table.
STEPS, MAX_EPOCHS = [0, 94, 154, 196], 239

# The tiny recognizer recipe with MultigridHook (demo data): base (B, T, S)
# = (4, 16, 56), 4 epochs, milestone 2, long cycle (T/2, S/sqrt2) then base.
TINY = osp.join(ROOT, 'tests', 'multigrid', 'tiny_mg.py')
# Its MultigridHook.
TINY_HOOK = dict(type='mmext.MultigridHook',
                 long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                 bn_base_size=4, precise_bn_iters=2)
# The stock I3D Kinetics-400 recipe with MultigridHook.
I3D = osp.join(ROOT, 'configs', 'multigrid',
               'i3d_r50_multigrid_8xb8-32x2x1-100e_kinetics400-rgb.py')
# A train pipeline of base (T, S) = (16, 56), and a step schedule for it.
PIPE = [
    dict(type='SampleFrames', clip_len=16, frame_interval=2, num_clips=1),
    dict(type='Resize', scale=(56, 56), keep_ratio=False),
]
STEP = dict(type='MultiStepLR', by_epoch=True, begin=0, end=4,
            milestones=[2], gamma=0.1)
# What the warning for the I3D recipe shortened to 2 epochs names.
I3D_MILESTONES = 'MultiStepLR milestones [40, 80]'

# A decoding train pipeline of base (T, S) = (4, 32).
PIPELINE = [
    dict(type='DecordInit'),
    dict(type='SampleFrames', clip_len=4, frame_interval=2, num_clips=1),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(32, 32), keep_ratio=False),
    dict(type='FormatShape', input_format='NCTHW'),
    dict(type='PackActionInputs')
]

# The buffers of a BN layer.
STATS = ('running_mean', 'running_var', 'num_batches_tracked')


def bn_layers(model):
    """``{name: layer}`` of the model's BatchNorm layers."""
    return {n: m for n, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm)}


def load_random_stats(model, seed):
    """Stand-in for statistics loaded from a pretrained checkpoint."""
    gen = torch.Generator().manual_seed(seed)
    for m in bn_layers(model).values():
        n = m.num_features
        m.running_mean.copy_(torch.rand(n, generator=gen) - 0.5)
        m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
        m.num_batches_tracked.fill_(1234)


@HOOKS.register_module(force=True)
class ShapeRecorderHook(Hook):
    """Record ``(epoch, iter, inputs shape, lr)`` of every training
    iteration; dump them as ``shapes_rank<r>.json`` into the work dir.

    Registered when this module is imported (``custom_imports=['mg_helpers']``
    in a child process with ``tests`` and ``tests/multigrid`` on
    ``PYTHONPATH``). ``stop_after_epoch`` ends training early to simulate an
    interruption.
    """

    priority = 'LOWEST'

    def __init__(self, stop_after_epoch=None):
        self.records = []
        self.stop_after_epoch = stop_after_epoch

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        lr = runner.optim_wrapper.optimizer.param_groups[0]['lr']
        shapes = sorted({tuple(x.shape) for x in data_batch['inputs']})
        self.records.append(
            dict(epoch=runner.epoch, iter=runner.iter, batch=len(
                data_batch['inputs']), shapes=shapes, lr=lr,
                 max_iters=runner.max_iters))

    def after_train_epoch(self, runner):
        if self.stop_after_epoch is not None and (
                runner.epoch + 1 == self.stop_after_epoch):
            runner.train_loop.stop_training = True

    def after_train(self, runner):
        path = osp.join(runner.work_dir, f'shapes_rank{get_rank()}.json')
        with open(path, 'w') as f:
            json.dump(self.records, f)


def recorded(stop_after_epoch=None, **hook):
    """``custom_hooks`` of TINY with the recorder (hook options edited)."""
    return [dict(TINY_HOOK, **hook),
            dict(type='ShapeRecorderHook', stop_after_epoch=stop_after_epoch)]


def tiny_runner(work_dir, runner_type=None, **options):
    """A runner of TINY with ``options`` merged, its own experiment name
    (runners of one config built in the same second share a message hub)
    and, by default, mmext's runner (``runner_type='Runner'``: mmengine's,
    built with ``mmengine.runner.Runner.from_cfg``)."""
    from bench_utils import build_runner, load_run_config
    options.setdefault('experiment_name', osp.basename(str(work_dir)))
    cfg = load_run_config(TINY, options, str(work_dir))
    if runner_type == 'Runner':
        from mmengine.runner import Runner
        cfg.pop('runner_type', None)
        return Runner.from_cfg(cfg)
    return build_runner(cfg)


def read_shapes(work_dir, rank=0):
    """The recorder's records of a run."""
    with open(osp.join(work_dir, f'shapes_rank{rank}.json')) as f:
        return json.load(f)
