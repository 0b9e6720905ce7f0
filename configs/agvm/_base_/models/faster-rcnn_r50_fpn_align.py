# The reference's faster_rcnn_r50_fpn_align model (Sense-X/AGVM
# configs/object_detection/_base_/models/faster_rcnn_r50_fpn_align.py,
# mmdet 2.x) as what it changes in mmdet 3.x's stock model (SyncBN backbone):
# * RPN: softmax classification (CrossEntropyLoss use_sigmoid=False; stock:
#   sigmoid) and SmoothL1Loss beta=1/9 (stock: L1Loss);
# * RoI box head: SmoothL1Loss beta=1.0 (stock: L1Loss);
# * RoIAlign sampling_ratio=2 (stock: 0, adaptive);
# * 2000 RPN proposals per image in training (stock: 1000);
# * test score_thr=0.0 (stock: 0.05).
_base_ = './faster-rcnn_r50_fpn_syncbn.py'

model = dict(
    rpn_head=dict(
        loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False,
                      loss_weight=1.0),
        loss_bbox=dict(type='SmoothL1Loss', beta=1.0 / 9.0,
                       loss_weight=1.0)),
    roi_head=dict(
        bbox_roi_extractor=dict(roi_layer=dict(sampling_ratio=2)),
        bbox_head=dict(
            loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0))),
    train_cfg=dict(rpn_proposal=dict(nms_pre=2000, max_per_img=2000)),
    test_cfg=dict(rcnn=dict(score_thr=0.0)))
