# mask-rcnn_r50_fpn_agvm_32xb16-16e_coco.py (batch 512, the released
# mask_rcnn_res50_bs512.py) with the reference's mask_rcnn_r50_fpn_align
# model (see ./_base_/models/rcnn_align.py).
_base_ = [
    './mask-rcnn_r50_fpn_agvm_32xb16-16e_coco.py',
    './_base_/models/rcnn_align.py'
]

model = {{_base_.mask_rcnn_align}}
