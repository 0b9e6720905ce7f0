# Mask R-CNN R50-FPN with AGVM at batch 256 (16 GPUs x 16 images): the
# released mask_rcnn_res50_bs256.py schedule (lr 0.16*sqrt(2), as the Faster
# R-CNN one; ./_base_/schedule_agvm-sgd-16e_bs256.py) on mmdet 3.x's stock
# model (the reference's: mask-rcnn_r50_fpn_align_agvm_16xb16-16e_coco.py).
# The box head and the mask head get a factor each.
_base_ = [
    './_base_/models/mask-rcnn_r50_fpn_syncbn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './_base_/schedule_agvm-sgd-16e_bs256.py', 'mmdet::_base_/default_runtime.py'
]

train_dataloader = dict(batch_size=16, num_workers=8)
optim_wrapper = dict(
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head.bbox_head',
                  'roi_head.mask_head'])
