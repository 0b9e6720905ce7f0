# Semantic FPN R50 on ADE20K with AGVM at batch 128 (16 GPUs x 8 images):
# mmseg's 4xb4-160k recipe (SGD lr 0.01 at batch 16) scaled linearly to
# lr 0.08 and 160k / 8 = 20k iterations, SyncBN, a 500-iteration exponential
# warm-up from 0.001 (as the detection recipes) and
# AGVM from iteration 600 (modules backbone, neck, decode_head), tau = 10.
_base_ = 'mmseg::sem_fpn/fpn_r50_4xb4-160k_ade20k-512x512.py'

warmup_iters = 500
agvm_start = warmup_iters + 100
max_iters = 20000

train_dataloader = dict(batch_size=8, num_workers=8)
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters,
                 val_interval=2000)
param_scheduler = [
    dict(type='mmext.ExpWarmupLR', start_factor=0.001, by_epoch=False,
         begin=0, end=warmup_iters),
    dict(type='PolyLR', eta_min=1e-4, power=0.9, begin=warmup_iters,
         end=max_iters, by_epoch=False)
]
optim_wrapper = dict(
    type='mmext.AGVMOptimWrapper',
    constructor='mmext.AGVMOptimWrapperConstructor',
    optimizer=dict(type='SGD', lr=0.08, momentum=0.9, weight_decay=5e-4),
    module_names=['backbone', 'neck', 'decode_head'],
    update_interval=10,
    start_iter=agvm_start,
    # mmseg's base sets clip_grad=None, which a dict cannot merge into.
    clip_grad=dict(_delete_=True, max_norm=1.0, norm_type=2),
    clip_grad_window=(agvm_start - 200, agvm_start))
default_hooks = dict(checkpoint=dict(interval=2000))
# Stop at the first non-finite loss or gradient, naming it (mmext.NaNGuardHook).
custom_hooks = [dict(type='mmext.NaNGuardHook')]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
