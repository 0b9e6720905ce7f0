# Faster R-CNN R50-FPN with AGVM at batch 512 (32 GPUs x 16 images), the
# paper's recipe (released config faster_rcnn_res50_bs512.py): SyncBN
# backbone, lr 0.38, 460 warm-up iterations, clipping in [360, 560], AGVM
# from iteration 560 (see ./_base_/schedule_agvm-sgd-16e.py).
_base_ = [
    'mmdet::_base_/models/faster-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    './_base_/schedule_agvm-sgd-16e.py', 'mmdet::_base_/default_runtime.py'
]

model = dict(
    backbone=dict(norm_cfg=dict(type='SyncBN', requires_grad=True),
                  norm_eval=False))
train_dataloader = dict(batch_size=16, num_workers=8)
optim_wrapper = dict(module_names=['backbone', 'neck', 'rpn_head', 'roi_head'])
