# Faster R-CNN R50-FPN with AGVM at batch 256 (16 GPUs x 16 images), the
# paper's recipe (Xue et al., NeurIPS 2022; released config
# Sense-X/AGVM configs/object_detection/agvm/faster_rcnn_res50_bs256.py):
# SGD lr 0.16*sqrt(2), SyncBN backbone, 16 epochs with steps at 12 and 14,
# 920 warm-up iterations, gradient clipping to norm 1.0 only in iterations
# [820, 1020), AGVM from iteration 1020 (100 after warm-up), tau = 10.
# Deviation: mmengine has no 'exp' warm-up; a linear one is used.
_base_ = 'mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py'

warmup_iters = 920
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
    optimizer=dict(type='SGD', lr=0.16 * 2**0.5, momentum=0.9,
                   weight_decay=1e-4),
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head'],
    update_interval=10,
    ema_momentum=0.97,
    ratio_range=(0.5, 10.0),
    start_iter=agvm_start,
    clip_grad=dict(max_norm=1.0, norm_type=2),
    clip_grad_window=(agvm_start - 200, agvm_start))
auto_scale_lr = dict(enable=False, base_batch_size=256)
