# mmdet 3.x's stock Faster R-CNN R50-FPN with the released AGVM recipes'
# backbone BN: SyncBN that trains (norm_eval=False).
_base_ = 'mmdet::_base_/models/faster-rcnn_r50_fpn.py'

model = dict(
    backbone=dict(norm_cfg=dict(type='SyncBN', requires_grad=True),
                  norm_eval=False))
