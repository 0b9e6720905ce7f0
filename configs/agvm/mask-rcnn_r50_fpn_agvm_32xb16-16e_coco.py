# Mask R-CNN R50-FPN with AGVM at batch 512 (32 GPUs x 16 images), the
# paper's recipe (released config mask_rcnn_res50_bs512.py): SGD lr 0.32,
# SyncBN backbone, 16 epochs, steps 12/14, 460 warm-up iterations (linear
# here, 'exp' there), clipping in [360, 560), AGVM from 560, tau = 10.
_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'

warmup_iters = 460
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
    optimizer=dict(type='SGD', lr=0.32, momentum=0.9, weight_decay=1e-4),
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head'],
    update_interval=10,
    start_iter=agvm_start,
    clip_grad=dict(max_norm=1.0, norm_type=2),
    clip_grad_window=(agvm_start - 200, agvm_start))
auto_scale_lr = dict(enable=False, base_batch_size=512)
