# The paper's I3D R50 Kinetics-400 multigrid recipe: mmaction2's I3D config
# plus the hook (T=32 base, so the T/4 = 8 shape still fits I3D's T >= 8).
_base_ = 'mmaction::recognition/i3d/i3d_imagenet-pretrained-r50_8xb8-32x2x1-100e_kinetics400-rgb.py'  # noqa: E501

custom_hooks = [
    dict(type='mmext.MultigridHook',
         long_cycle=True, short_cycle=True, epoch_factor=1.5,
         short_cycle_mode='absolute', bn_base_size=8, precise_bn_iters=200)
]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
