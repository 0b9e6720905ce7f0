# The released mask_rcnn_res50_bs256.py: batch 256 (16 GPUs x 16 images),
# the reference's mask_rcnn_r50_fpn_align model
# (./_base_/models/mask-rcnn_r50_fpn_align.py) and batch-256 schedule
# (./_base_/schedule_agvm-sgd-16e_bs256.py); box and mask heads apart.
_base_ = [
    './_base_/models/mask-rcnn_r50_fpn_align.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './_base_/schedule_agvm-sgd-16e_bs256.py', 'mmdet::_base_/default_runtime.py'
]

train_dataloader = dict(batch_size=16, num_workers=8)
optim_wrapper = dict(
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head.bbox_head',
                  'roi_head.mask_head'])
