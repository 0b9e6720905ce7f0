# RetinaNet R50-FPN with AGVM at batch 1024 (64 GPUs x 16 images). The
# authors released no RetinaNet config; this uses their detection schedule
# (./_base_/schedule_agvm-sgd-16e.py) with mmdet's lr 0.01 at batch 16
# scaled linearly to 0.64 and tau = 5, as the paper uses above ~1k images
# per batch. Modules: backbone (anchor), neck, bbox_head.
_base_ = [
    'mmdet::_base_/models/retinanet_r50_fpn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    './_base_/schedule_agvm-sgd-16e.py', 'mmdet::_base_/default_runtime.py'
]

model = dict(
    backbone=dict(norm_cfg=dict(type='SyncBN', requires_grad=True),
                  norm_eval=False))
train_dataloader = dict(batch_size=16, num_workers=8)
optim_wrapper = dict(
    optimizer=dict(lr=0.64),
    module_names=['backbone', 'neck', 'bbox_head'],
    update_interval=5)
auto_scale_lr = dict(base_batch_size=1024)
