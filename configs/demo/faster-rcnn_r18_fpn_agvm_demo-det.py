# AGVM on the embedded demo detection set (`make demo`): the plain demo recipe
# (micro-batch 4, lr 0.01, its linear warm-up over 12 iterations) with the
# optimizer wrapper switched to AGVM. One CPU process has no two halves of
# ranks, so the halves are the two accumulated micro-batches of every step
# (accumulative_counts=2: 8 images per step), and the run trains twice the
# plain demo's epochs, which keeps its 72 optimizer steps. AGVM starts 4
# iterations after the warm-up and re-estimates every 2 steps. Over 3 seeds
# the same recipe with and without AGVM, and the plain demo, reach the same
# bbox mAP within seed noise (docs/en/benchmarks.md, the AGVM demo).
_base_ = './faster-rcnn_r18_fpn_demo-det.py'

train_cfg = dict(max_epochs=12, val_interval=12)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=12),
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=12, milestones=[10],
         gamma=0.1)
]
optim_wrapper = dict(
    type='mmext.AGVMOptimWrapper',
    constructor='mmext.AGVMOptimWrapperConstructor',
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head'],
    accumulative_counts=2,
    update_interval=2,
    start_iter=16)
default_hooks = dict(checkpoint=dict(interval=12))
# Stop at the first non-finite loss or gradient, naming it (mmext.NaNGuardHook).
custom_hooks = [dict(type='mmext.NaNGuardHook')]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
