# Multigrid training of the demo ResNet3d-18 (`make demo`): the plain recipe
# plus one hook. The I3D-style stem needs T >= 8 and the recipe's T is 16, so
# the long cycle drops the paper's T/4 shape. The 64-clip demo set would fit in
# one batch of 8 x 8 clips, so the base batch is 4 (LR scaled linearly) to let
# the short cycle show its three sizes every epoch.
_base_ = './recognizer3d_r18_demo-video.py'

train_dataloader = dict(batch_size=4)
optim_wrapper = dict(optimizer=dict(lr=0.025))
# Multigrid's large batches leave few iterations per epoch on 64 clips: train
# 40 recipe epochs (60 multigrid epochs, 236 iterations, under a minute).
train_cfg = dict(max_epochs=40, val_interval=15)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=1,
         convert_to_iter_based=True),
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=40,
         milestones=[28, 36], gamma=0.1)
]
default_hooks = dict(checkpoint=dict(interval=15))

# Short cycle: the paper's factors [1/2, 1/sqrt2] of a 224 px base crop give
# 112 and 158 px; of this demo's 56 px they give 28 and 40 px, and at 28 px the
# ResNet3d-18 (total stride 32) leaves its last stage a 1x1 feature map
# (1x1x1 at the T/2 shapes), which cost 13 points of top-1 on this demo
# (seeds 0-9; docs/en/multigrid_accuracy_study.md). 0.6 gives 34 px, the
# smallest crop (>= 33 px) that keeps a 2x2 final map, with the same batch
# multipliers as 0.5 would nearly give (3x instead of 4x at the base shape).
custom_hooks = [
    dict(
        type='mmext.MultigridHook',
        long_cycle=True,
        short_cycle=True,
        epoch_factor=1.5,
        long_cycle_factors=[(0.5, 0.5**0.5), (0.5, 1), (1, 1)],
        # Not the paper's [0.5, 0.707]: see the comment above.
        short_cycle_factors=[0.6, 0.5**0.5],
        short_cycle_mode='absolute',
        bn_base_size=4,
        precise_bn_iters=4)
]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
