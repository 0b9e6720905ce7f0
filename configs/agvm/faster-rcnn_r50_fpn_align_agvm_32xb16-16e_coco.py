# faster-rcnn_r50_fpn_agvm_32xb16-16e_coco.py (batch 512, the released
# faster_rcnn_res50_bs512.py schedule) with the reference's
# faster_rcnn_r50_fpn_align model instead of mmdet 3.x's stock one (see
# ./_base_/models/rcnn_align.py for what differs).
_base_ = [
    './faster-rcnn_r50_fpn_agvm_32xb16-16e_coco.py',
    './_base_/models/rcnn_align.py'
]

model = {{_base_.faster_rcnn_align}}
