# The paper's large-batch detection schedule with AGVM (Xue et al.,
# NeurIPS 2022; released configs Sense-X/AGVM
# configs/object_detection/agvm/*_bs512.py): SGD m=0.9 wd=1e-4, 16 epochs
# with steps at 12 and 14, an exponential warm-up from 0.001 over 460
# iterations (mmcv's warmup='exp': mmext.ExpWarmupLR), gradient clipping to
# norm 1.0 only in the 200 iterations before AGVM starts (100 iterations
# after the warm-up), tau = 10, alpha = 0.97. module_names defaults to the
# detector's top-level children (backbone, neck, rpn_head, roi_head /
# bbox_head; Mask R-CNN: roi_head.bbox_head and roi_head.mask_head),
# backbone = anchor.
warmup_iters = 460
agvm_start = warmup_iters + 100

train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=16, val_interval=1)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
param_scheduler = [
    dict(type='mmext.ExpWarmupLR', start_factor=0.001, by_epoch=False,
         begin=0, end=warmup_iters),
    dict(type='MultiStepLR', begin=0, end=16, by_epoch=True,
         milestones=[12, 14], gamma=0.1)
]
optim_wrapper = dict(
    type='mmext.AGVMOptimWrapper',
    constructor='mmext.AGVMOptimWrapperConstructor',
    optimizer=dict(type='SGD', lr=0.38, momentum=0.9, weight_decay=1e-4),
    update_interval=10,
    ema_momentum=0.97,
    ratio_range=(0.5, 10.0),
    start_iter=agvm_start,
    clip_grad=dict(max_norm=1.0, norm_type=2),
    clip_grad_window=(agvm_start - 200, agvm_start))
auto_scale_lr = dict(enable=False, base_batch_size=512)
# Stop at the first non-finite loss or gradient, naming it (mmext.NaNGuardHook).
custom_hooks = [dict(type='mmext.NaNGuardHook')]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
