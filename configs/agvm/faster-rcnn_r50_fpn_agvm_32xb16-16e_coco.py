# Faster R-CNN R50-FPN with AGVM at batch 512 (32 GPUs x 16 images): the
# released faster_rcnn_res50_bs512.py schedule (SyncBN backbone, lr 0.38, 460
# warm-up iterations, clipping in [360, 560], AGVM from 560;
# ./_base_/schedule_agvm-sgd-16e.py) on mmdet 3.x's stock model (the
# reference's: faster-rcnn_r50_fpn_align_agvm_32xb16-16e_coco.py).
_base_ = [
    './_base_/models/faster-rcnn_r50_fpn_syncbn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    './_base_/schedule_agvm-sgd-16e.py', 'mmdet::_base_/default_runtime.py'
]

train_dataloader = dict(batch_size=16, num_workers=8)
optim_wrapper = dict(module_names=['backbone', 'neck', 'rpn_head', 'roi_head'])
