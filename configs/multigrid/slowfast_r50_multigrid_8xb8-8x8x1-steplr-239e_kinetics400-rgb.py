# The paper's SlowFast R50 8x8 Kinetics-400 multigrid recipe: mmaction2's
# step-LR SlowFast config with PySlowFast's schedule (steps [0, 94, 154, 196],
# 239 epochs) plus the hook; trains 358 multigrid epochs (the PySlowFast reference schedule, README "Schedule of the SlowFast reference").
_base_ = 'mmaction::recognition/slowfast/slowfast_r50_8xb8-8x8x1-steplr-256e_kinetics400-rgb.py'  # noqa: E501

train_cfg = dict(max_epochs=239)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=34,
         convert_to_iter_based=True),
    dict(type='MultiStepLR', begin=0, end=239, by_epoch=True,
         milestones=[94, 154, 196], gamma=0.1)
]
custom_hooks = [
    dict(type='mmext.MultigridHook',
         long_cycle=True, short_cycle=True, epoch_factor=1.5,
         long_cycle_factors=[(0.25, 0.5**0.5), (0.5, 0.5**0.5), (0.5, 1),
                             (1, 1)],
         short_cycle_factors=[0.5, 0.5**0.5],
         short_cycle_mode='absolute',
         bn_base_size=8, precise_bn_iters=200)
]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
