# faster-rcnn_r50_fpn_agvm_16xb16-16e_coco.py (batch 256, the released
# faster_rcnn_res50_bs256.py schedule) with the reference's
# faster_rcnn_r50_fpn_align model (see ./_base_/models/rcnn_align.py).
_base_ = [
    './faster-rcnn_r50_fpn_agvm_16xb16-16e_coco.py',
    './_base_/models/rcnn_align.py'
]

model = {{_base_.faster_rcnn_align}}
