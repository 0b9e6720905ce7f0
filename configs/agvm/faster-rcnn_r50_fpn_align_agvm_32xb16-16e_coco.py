# The released faster_rcnn_res50_bs512.py: batch 512 (32 GPUs x 16 images),
# the reference's faster_rcnn_r50_fpn_align model
# (./_base_/models/faster-rcnn_r50_fpn_align.py) and batch-512 schedule
# (./_base_/schedule_agvm-sgd-16e.py).
_base_ = [
    './_base_/models/faster-rcnn_r50_fpn_align.py',
    'mmdet::_base_/datasets/coco_detection.py',
    './_base_/schedule_agvm-sgd-16e.py', 'mmdet::_base_/default_runtime.py'
]

train_dataloader = dict(batch_size=16, num_workers=8)
optim_wrapper = dict(module_names=['backbone', 'neck', 'rpn_head', 'roi_head'])
