# Faster R-CNN R18-FPN (the stock mmdet R50-FPN recipe with a ResNet-18
# backbone, no pretrained weights) on the embedded demo detection set
# (`make demo-data`): rectangles and discs on 128 px images (at most 3 objects
# each), so a light head suffices: 64-channel FPN and RPN, a 256-wide box head
# and fewer proposals and RoIs than mmdet's (about 2.5x cheaper per image).
_base_ = 'mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py'

data_root = '{{$MMEXT_DEMO_DATA:data/demo}}/det/'
metainfo = dict(classes=('rectangle', 'disc'))
image_scale = (128, 128)

# No pretrained weights: every BN layer trains (mmdet's recipe keeps them in
# eval mode and freezes the stem and stage 1, which assumes ImageNet weights).
model = dict(
    backbone=dict(depth=18, init_cfg=None, norm_eval=False, frozen_stages=-1),
    neck=dict(in_channels=[64, 128, 256, 512], out_channels=64),
    rpn_head=dict(in_channels=64, feat_channels=64),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=64),
        bbox_head=dict(in_channels=64, fc_out_channels=256, num_classes=2)),
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=500, max_per_img=200),
        rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=200)))

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
    batch_size=4,
    num_workers=2,
    dataset=dict(
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/train.json',
        data_prefix=dict(img='images/'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=4,
    num_workers=2,
    dataset=dict(
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/val.json',
        data_prefix=dict(img='images/'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/val.json')
test_evaluator = val_evaluator

train_cfg = dict(max_epochs=6, val_interval=3)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=12),
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=6, milestones=[5],
         gamma=0.1)
]
optim_wrapper = dict(optimizer=dict(lr=0.01))
default_hooks = dict(
    logger=dict(interval=4), checkpoint=dict(interval=3, max_keep_ckpts=1))
auto_scale_lr = dict(enable=False, base_batch_size=4)
randomness = dict(seed=0)
