# RetinaNet R50-FPN with AGVM at batch 1024 (64 GPUs x 16 images). The
# authors released no RetinaNet config; this follows their detection recipe
# (SyncBN, 16 epochs, steps 12/14, clip window before the start) with
# mmdet's lr 0.01 at batch 16 scaled linearly to 0.64, a longer warm-up for
# the larger batch, and tau = 5 as the paper uses above ~1k images per batch.
_base_ = 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'

warmup_iters = 1000
agvm_start = warmup_iters + 100

model = dict(
    backbone=dict(norm_cfg=dict(type='SyncBN', requires_grad=True),
                  norm_eval=False))

train_dataloader = dict(batch_size=16, num_workers=8)
train_cfg = dict(max_epochs=16)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
         end=warmup_iters),
    dict(type='MultiStepLR', begin=0, end=16, by_epoch=True,
         milestones=[12, 14], gamma=0.1)
]
optim_wrapper = dict(
    type='mmext.AGVMOptimWrapper',
    constructor='mmext.AGVMOptimWrapperConstructor',
    optimizer=dict(type='SGD', lr=0.64, momentum=0.9, weight_decay=1e-4),
    module_names=['backbone', 'neck', 'bbox_head'],
    update_interval=5,
    start_iter=agvm_start,
    clip_grad=dict(max_norm=1.0, norm_type=2),
    clip_grad_window=(agvm_start - 200, agvm_start))
auto_scale_lr = dict(enable=False, base_batch_size=1024)
