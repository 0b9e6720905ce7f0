# Tiny multigrid run on the embedded demo data for the tests (seconds/epoch).
_base_ = '../../configs/demo/recognizer3d_r18_demo-video.py'

model = dict(backbone=dict(base_channels=8), cls_head=dict(in_channels=64))
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False)
val_dataloader = dict(batch_size=8, num_workers=0, persistent_workers=False)
test_dataloader = val_dataloader
train_cfg = dict(max_epochs=4, val_interval=3)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=1,
         convert_to_iter_based=True),
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=4, milestones=[2],
         gamma=0.1)
]
default_hooks = dict(
    logger=dict(interval=1),
    checkpoint=dict(interval=1, max_keep_ckpts=10, save_best=None))
randomness = dict(seed=0)
custom_hooks = [
    dict(type='mmext.MultigridHook',
         long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
         bn_base_size=4, precise_bn_iters=2)
]
