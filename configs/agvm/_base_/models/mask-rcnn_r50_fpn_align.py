# The reference's mask_rcnn_r50_fpn_align model (Sense-X/AGVM
# configs/object_detection/_base_/models/mask_rcnn_r50_fpn_align.py) as what
# it changes in mmdet 3.x's stock model: the changes of
# ./faster-rcnn_r50_fpn_align.py, except that the box RoIs keep
# sampling_ratio=0 and the mask RoIs take 2.
_base_ = './mask-rcnn_r50_fpn_syncbn.py'

model = dict(
    rpn_head=dict(
        loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False,
                      loss_weight=1.0),
        loss_bbox=dict(type='SmoothL1Loss', beta=1.0 / 9.0,
                       loss_weight=1.0)),
    roi_head=dict(
        bbox_roi_extractor=dict(roi_layer=dict(sampling_ratio=0)),
        bbox_head=dict(
            loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0)),
        mask_roi_extractor=dict(roi_layer=dict(sampling_ratio=2))),
    train_cfg=dict(rpn_proposal=dict(nms_pre=2000, max_per_img=2000)),
    test_cfg=dict(rcnn=dict(score_thr=0.0)))
