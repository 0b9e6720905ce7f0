# Mask R-CNN R50-FPN with AGVM at batch 512 (32 GPUs x 16 images): the
# released mask_rcnn_res50_bs512.py schedule (SyncBN backbone, lr 0.32,
# otherwise ./_base_/schedule_agvm-sgd-16e.py) on mmdet 3.x's stock model
# (the reference's: mask-rcnn_r50_fpn_align_agvm_32xb16-16e_coco.py). As in
# the reference, the box head and the mask head get a factor each.
_base_ = [
    './_base_/models/mask-rcnn_r50_fpn_syncbn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './_base_/schedule_agvm-sgd-16e.py', 'mmdet::_base_/default_runtime.py'
]

train_dataloader = dict(batch_size=16, num_workers=8)
optim_wrapper = dict(
    optimizer=dict(lr=0.32),
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head.bbox_head',
                  'roi_head.mask_head'])
