"""Values and helpers shared by the multigrid test modules."""
import os.path as osp

import torch
from helpers import REPO_ROOT
from torch import nn

ROOT = REPO_ROOT

# LR stages and epochs of PySlowFast's Kinetics-400 SlowFast 8x8 R50
# stepwise recipe (SOLVER.STEPS, SOLVER.MAX_EPOCH), whose multigrid
# schedule is the reference table.
STEPS, MAX_EPOCHS = [0, 94, 154, 196], 239


# The tiny recognizer recipe with MultigridHook (demo data).
TINY = osp.join(ROOT, 'tests', 'multigrid', 'tiny_mg.py')
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
# The warning for the I3D recipe shortened to 2 epochs.
I3D_MILESTONES = (
    "MultiStepLR milestones [40, 80] lie outside the recipe's 2 epochs, so "
    'they are not LR stages of the multigrid schedule (LR stages start at '
    '[0, 2]).')
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
