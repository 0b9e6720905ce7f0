# Multigrid training of the demo ResNet3d-18 (`make demo`): the plain recipe
# plus one hook. The I3D-style stem needs T >= 8 and the recipe's T is 16, so
# the long cycle drops the paper's T/4 shape.
_base_ = './recognizer3d_r18_demo-video.py'

custom_hooks = [
    dict(
        type='mmext.MultigridHook',
        long_cycle=True,
        short_cycle=True,
        epoch_factor=1.5,
        long_cycle_factors=[(0.5, 0.5**0.5), (0.5, 1), (1, 1)],
        short_cycle_factors=[0.5, 0.5**0.5],
        short_cycle_mode='absolute',
        bn_base_size=8,
        precise_bn_iters=4)
]
