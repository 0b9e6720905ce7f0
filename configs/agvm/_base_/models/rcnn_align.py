# The reference's "_align" R-CNN models (Sense-X/AGVM
# configs/object_detection/_base_/models/{faster,mask}_rcnn_r50_fpn_align.py,
# mmdet 2.x), written as what they change in mmdet 3.x's stock
# _base_/models/{faster,mask}-rcnn_r50_fpn.py:
# * RPN: softmax classification (CrossEntropyLoss use_sigmoid=False; stock:
#   sigmoid) and SmoothL1Loss beta=1/9 (stock: L1Loss);
# * RoI box head: SmoothL1Loss beta=1.0 (stock: L1Loss);
# * RoIAlign sampling_ratio=2 (stock: 0, adaptive) for Faster R-CNN's box
#   RoIs and Mask R-CNN's mask RoIs (its box RoIs keep 0, as the reference);
# * 2000 RPN proposals per image in training (stock: 1000);
# * test score_thr=0.0 (stock: 0.05).
# The configs of this folder use them through
# `model = {{_base_.faster_rcnn_align}}` / `{{_base_.mask_rcnn_align}}`.
_rpn_head = dict(
    loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False,
                  loss_weight=1.0),
    loss_bbox=dict(type='SmoothL1Loss', beta=1.0 / 9.0, loss_weight=1.0))
_bbox_loss = dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0)
_train_cfg = dict(rpn_proposal=dict(nms_pre=2000, max_per_img=2000))
_test_cfg = dict(rcnn=dict(score_thr=0.0))

faster_rcnn_align = dict(
    rpn_head=_rpn_head,
    roi_head=dict(
        bbox_roi_extractor=dict(roi_layer=dict(sampling_ratio=2)),
        bbox_head=dict(loss_bbox=_bbox_loss)),
    train_cfg=_train_cfg,
    test_cfg=_test_cfg)
mask_rcnn_align = dict(
    rpn_head=_rpn_head,
    roi_head=dict(
        bbox_roi_extractor=dict(roi_layer=dict(sampling_ratio=0)),
        bbox_head=dict(loss_bbox=_bbox_loss),
        mask_roi_extractor=dict(roi_layer=dict(sampling_ratio=2))),
    train_cfg=_train_cfg,
    test_cfg=_test_cfg)
