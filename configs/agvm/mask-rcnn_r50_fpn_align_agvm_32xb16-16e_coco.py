# The released mask_rcnn_res50_bs512.py: batch 512 (32 GPUs x 16 images),
# lr 0.32, the reference's mask_rcnn_r50_fpn_align model
# (./_base_/models/mask-rcnn_r50_fpn_align.py) and batch-512 schedule
# (./_base_/schedule_agvm-sgd-16e.py); box and mask heads apart.
_base_ = [
    './_base_/models/mask-rcnn_r50_fpn_align.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './_base_/schedule_agvm-sgd-16e.py', 'mmdet::_base_/default_runtime.py'
]

train_dataloader = dict(batch_size=16, num_workers=8)
optim_wrapper = dict(
    optimizer=dict(lr=0.32),
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head.bbox_head',
                  'roi_head.mask_head'])
