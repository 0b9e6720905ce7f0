# AGVM on the embedded demo detection set (`make demo`): the plain demo recipe
# (4 images per optimizer step at lr 0.01) with the optimizer wrapper switched
# to AGVM. One CPU process has no two halves of ranks, so the halves are the
# two accumulated micro-batches of every step (accumulative_counts=2: 2 x 2
# images per step). As in the paper's recipes: an exponential warm-up from
# 0.001 (mmext.ExpWarmupLR, mmcv's warmup='exp') and AGVM from 8 iterations
# after the warm-up, re-estimating every 2 optimizer steps. Unlike the paper's
# recipes (pretrained backbones), this detector trains from scratch: its
# gradients stay clipped (norm 10) for the whole run, without which it
# diverges once clipping stops (measured: loss 1.3 -> 550 within 8 steps).
_base_ = './faster-rcnn_r18_fpn_demo-det.py'

warmup_iters = 24  # micro-batches: 12 optimizer steps, 48 images
agvm_start = warmup_iters + 8

train_dataloader = dict(batch_size=2)
param_scheduler = [
    dict(type='mmext.ExpWarmupLR', start_factor=0.001, by_epoch=False,
         begin=0, end=warmup_iters),
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=6, milestones=[5],
         gamma=0.1)
]
optim_wrapper = dict(
    type='mmext.AGVMOptimWrapper',
    constructor='mmext.AGVMOptimWrapperConstructor',
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head'],
    accumulative_counts=2,
    update_interval=2,
    start_iter=agvm_start,
    clip_grad=dict(max_norm=10.0))
default_hooks = dict(logger=dict(interval=4))
# Stop at the first non-finite loss or gradient, naming it (mmext.NaNGuardHook).
custom_hooks = [dict(type='mmext.NaNGuardHook')]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
