# Faster R-CNN R50-FPN with AGVM at batch 256 (16 GPUs x 16 images): the
# released faster_rcnn_res50_bs256.py schedule (lr 0.16*sqrt(2), 920 warm-up
# iterations, clipping in [820, 1020], AGVM from 1020;
# ./_base_/schedule_agvm-sgd-16e_bs256.py) on mmdet 3.x's stock model (the
# reference's: faster-rcnn_r50_fpn_align_agvm_16xb16-16e_coco.py).
_base_ = [
    './_base_/models/faster-rcnn_r50_fpn_syncbn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    './_base_/schedule_agvm-sgd-16e_bs256.py', 'mmdet::_base_/default_runtime.py'
]

train_dataloader = dict(batch_size=16, num_workers=8)
optim_wrapper = dict(module_names=['backbone', 'neck', 'rpn_head', 'roi_head'])
