# The stock mmdet Faster R-CNN R50-FPN recipe on the real COCO128 images
# (../shared/data/coco128; set MMEXT_DATA_ROOT to read it elsewhere), with small
# inputs and no pretrained weights: a CPU smoke test of the whole pipeline,
# COCO metric included.
_base_ = 'mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py'

data_root = '{{$MMEXT_DATA_ROOT:../shared/data}}/coco128/'
image_scale = (320, 320)

# An untrained detector scores about 1/81 per class, under the stock 0.05
# threshold: keep all boxes so the COCO metric is computed from the first epoch.
# No pretrained weights, so every BN layer and stage trains (mmdet's
# norm_eval=True / frozen_stages=1 assume ImageNet weights).
model = dict(
    backbone=dict(init_cfg=None, norm_eval=False, frozen_stages=-1),
    test_cfg=dict(rcnn=dict(score_thr=0.0)))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                    'scale_factor'))
]

train_dataloader = dict(
    batch_size=2,
    num_workers=2,
    dataset=dict(
        data_root=data_root,
        ann_file='annotations/train.json',
        data_prefix=dict(img='train2017/'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=2,
    num_workers=2,
    dataset=dict(
        data_root=data_root,
        ann_file='annotations/val.json',
        data_prefix=dict(img='train2017/'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/val.json')
test_evaluator = val_evaluator

train_cfg = dict(max_epochs=2, val_interval=1)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20),
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=2, milestones=[1],
         gamma=0.1)
]
optim_wrapper = dict(optimizer=dict(lr=0.005))
default_hooks = dict(logger=dict(interval=5),
                     checkpoint=dict(interval=1, max_keep_ckpts=1))
auto_scale_lr = dict(enable=False, base_batch_size=2)
